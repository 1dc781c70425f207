-- Drives slurm_drf_submit.lua (or the standalone job_submit.lua) as slurmctld's
-- job_submit/lua plugin would, with the `slurm` global, job_desc and part_list
-- stubbed. Run as `luaX.Y harness.lua CASE`; CASE is a Lua file the Python
-- tests write (tests/unit/submit/lua.py), returning
--   {module_dir = DIR, script = PATH or nil, time = T, configure = {...}, steps = {...}}.
-- Prints one tab-separated line per result and per log line, which lua.py reads.

local case = dofile(arg[1])

local NO_VAL = 4294967294
local NO_VAL16 = 65534
local NICE_OFFSET = 2147483648

local function show(value)
	if type(value) == "number" then
		if value == math.floor(value) and math.abs(value) < 2 ^ 63 then
			return string.format("%d", value)
		end
		return string.format("%.17g", value)
	end
	return tostring(value)
end

local function emit(...)
	local fields = {}
	for i = 1, select("#", ...) do
		fields[i] = string.gsub(show((select(i, ...))), "[\t\n]", " ")
	end
	io.write(table.concat(fields, "\t"), "\n")
end

-- The plugin's `slurm` table (src/lua/slurm_lua.c): log_* format their arguments.
slurm = {
	SUCCESS = 0,
	ERROR = -1,
	FAILURE = -1,
	NICE_OFFSET = NICE_OFFSET,
	NO_VAL = NO_VAL,
	NO_VAL16 = NO_VAL16,
	NO_VAL64 = 2 ^ 64,
	MEM_PER_CPU = 2 ^ 63,
	log_info = function(format, ...)
		emit("log", "info", string.format(format, ...))
	end,
	log_error = function(format, ...)
		emit("log", "error", string.format(format, ...))
	end,
}

-- A controllable clock, and counted opens of any file.
local now = case.time or 1000
local real_time = os.time
os.time = function(t)
	if t then
		return real_time(t)
	end
	return now
end
local opens = 0
local real_open = io.open
io.open = function(path, mode)
	opens = opens + 1
	return real_open(path, mode)
end

-- Numeric job_desc fields the plugin shows as NO_VAL* when unset.
local UNSET = {
	min_cpus = NO_VAL,
	num_tasks = NO_VAL,
	min_nodes = NO_VAL,
	max_nodes = NO_VAL,
	nice = NO_VAL,
	priority = NO_VAL,
	site_factor = NO_VAL,
	het_job_offset = NO_VAL,
	cpus_per_task = NO_VAL16,
	ntasks_per_node = NO_VAL16,
	ntasks_per_socket = NO_VAL16,
	ntasks_per_tres = NO_VAL16,
	sockets_per_node = NO_VAL16,
	pn_min_cpus = NO_VAL16,
	shared = NO_VAL16,
}

-- job_desc as the plugin pushes it: reads through __index, writes through __newindex.
local function job_desc(fields, raise_on)
	local values = {}
	for key, value in pairs(UNSET) do
		values[key] = value
	end
	for key, value in pairs(fields or {}) do
		values[key] = value
	end
	if values.pn_min_memory == nil then
		if values.min_mem_per_cpu then
			values.pn_min_memory = 2 ^ 63 + values.min_mem_per_cpu
		elseif values.min_mem_per_node then
			values.pn_min_memory = values.min_mem_per_node
		else
			values.pn_min_memory = 2 ^ 64
		end
	end
	local writes = {}
	local proxy = setmetatable({}, {
		__index = function(_, key)
			if key == raise_on then
				error("job_desc." .. key .. " raised")
			end
			if key == "gres" and values.gres == nil then
				return values.tres_per_node -- "gres" replaced by "tres_per_node" in v18.08
			end
			if key == "ntasks_per_gpu" then
				return values.ntasks_per_tres
			end
			return values[key]
		end,
		__newindex = function(_, key, value)
			writes[#writes + 1] = key .. "=" .. show(value)
			values[key] = value
		end,
	})
	return proxy, writes
end

local function part_list(parts)
	local list = {}
	for name, fields in pairs(parts or {}) do
		local part = { name = name }
		for key, value in pairs(fields) do
			part[key] = value
		end
		list[name] = part
	end
	return list
end

package.path = case.module_dir .. "/?.lua;" .. package.path
local before = {}
for name in pairs(_G) do
	before[name] = true
end
local M
if case.script then
	dofile(case.script)
	M = package.loaded.slurm_drf_submit
	if type(M) ~= "table" then
		M = nil -- not loaded, or not the module
	end
	if M and case.configure then
		M.configure(case.configure)
	end
else
	M = require("slurm_drf_submit")
	if case.configure then
		emit("configure", M.configure(case.configure))
	end
end
local added = {}
for name in pairs(_G) do
	if not before[name] then
		added[#added + 1] = name
	end
end
table.sort(added)
local unpack_list = unpack or table.unpack
emit("globals", unpack_list(added))
local parses = 0
if M then
	local parse = M.parse_table
	M.parse_table = function(...)
		parses = parses + 1
		return parse(...)
	end
end

local function results(id, first, ...)
	if first == nil then
		emit(id, "nil", (select(1, ...)))
	elseif type(first) == "table" then
		emit(id, "ok", unpack_list(first))
	else
		emit(id, "ok", first)
	end
end

for _, step in ipairs(case.steps) do
	if step.time then
		now = step.time
	end
	local op = step.op
	if op == "demand" then
		results(step.id, M.demand(job_desc(step.job), part_list(step.parts), step.resources, step.options))
	elseif op == "array" then
		results(step.id, M.array_size(step.inx))
	elseif op == "parse" then
		local parsed, reason = M.parse_table(step.text)
		if parsed then
			local points = 0
			for _, pool in ipairs(parsed.pools) do
				points = points + #pool.levels
			end
			emit(step.id, "ok", parsed.mode, #parsed.pools, points)
		else
			emit(step.id, "nil", reason)
		end
	elseif op == "place" or op == "submit" or op == "modify" then
		local job, writes = job_desc(step.job, step.raise_on)
		local answer
		if op == "place" then
			answer = M.place(job, part_list(step.parts), 1000)
		elseif op == "submit" then
			answer = slurm_job_submit(job, part_list(step.parts), 1000)
		else
			answer = slurm_job_modify(job, {}, part_list(step.parts), 1000)
		end
		emit(step.id, answer == nil and "-" or answer, #writes == 0 and "unchanged" or table.concat(writes, " "))
	elseif op == "write" then
		local file = assert(real_open(step.path, "wb"))
		file:write(step.text)
		file:close()
	elseif op == "remove" then
		os.remove(step.path)
	elseif op == "counters" then
		emit(step.id, opens, parses)
	else
		error("unknown op " .. tostring(op))
	end
end
