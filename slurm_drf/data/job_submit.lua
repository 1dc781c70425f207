-- job_submit.lua for sites without one of their own (docs/submit.md).
--
-- Install it beside slurm.conf with slurm_drf_submit.lua, set
-- JobSubmitPlugins=lua, and run `scontrol reconfigure`. Each new job gets,
-- at submission, the nice (or site_factor) slurm-drf's next cycle would give
-- it; nothing else is changed, and no job is ever rejected.
--
-- A site with its own job_submit.lua keeps it and adds one line to its
-- slurm_job_submit, before it returns (with this directory on package.path):
--
--     pcall(function() require("slurm_drf_submit").place(job_desc, part_list, submit_uid) end)

-- Where slurm_drf_submit.lua is when this script's own path is unknown
-- (slurmctld loads it from a file, so its directory is normally used).
local MODULE_DIR = "/etc/slurm"
-- The placement table; must match the daemon's `placement.path`
-- (slurm_drf/service/job_submit.py's installer rewrites this one line).
local SETTINGS = { table = "/var/lib/slurm-drf/placement.txt" }
-- slurm.conf's global DefMemPerCPU, DefMemPerNode and MaxMemPerCPU (MiB),
-- if it sets them outside partition lines, e.g. { def_mem_per_cpu = 2048 }:
-- job_submit/lua shows only a partition's own (the installer writes this
-- line from `scontrol show config`; `slurm-drf job-submit status` checks it).
local MEMORY = {}

local SUCCESS = (slurm and slurm.SUCCESS) or 0

local function log_error(message)
	pcall(function()
		slurm.log_error("%s", "slurm-drf: " .. message .. "; jobs are not placed at submission")
	end)
end

local function module_dir()
	local info = debug and debug.getinfo and debug.getinfo(1, "S")
	local source = info and info.source
	if type(source) == "string" and string.sub(source, 1, 1) == "@" then
		return string.match(string.sub(source, 2), "^(.*)/[^/]*$") or "."
	end
	return MODULE_DIR
end

local placement
do
	local ok, module = pcall(function()
		package.path = module_dir() .. "/?.lua;" .. package.path
		return require("slurm_drf_submit")
	end)
	if ok and type(module) == "table" and type(module.place) == "function" then
		placement = module
		local settings = { table = SETTINGS.table }
		for key, value in pairs(MEMORY) do
			settings[key] = value
		end
		local configured, problem = module.configure(settings)
		if not configured then
			log_error("configure: " .. tostring(problem))
		end
	else
		log_error("cannot load slurm_drf_submit.lua: " .. tostring(module))
	end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if placement then
		pcall(placement.place, job_desc, part_list, submit_uid)
	end
	return SUCCESS
end

-- Every update passes, the daemon's own `scontrol update ... nice=` included.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return SUCCESS
end

return SUCCESS
