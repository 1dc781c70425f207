-- slurm-drf's placement at submission: a job_submit/lua module (docs/submit.md).
--
-- Where it sits: slurmctld calls slurm_job_submit (job_submit.lua beside
-- slurm.conf), which calls M.place. The daemon publishes, every cycle, the
-- placement table (docs/formats.md, `slurm-drf-placement/1`): per pool the
-- capacity, each account's weight and usage before its next job, and the
-- pool's DRF order sampled as (level, value) points. M.place gives a new
-- job the value the next cycle would give it: its level over its account's
-- usage (the table's plus what the account had placed since the table was
-- read), then the value between the points around that level.
-- slurm_drf.policy.placement.Placer is the same rule in Python; the tests
-- hold this file to it.
--
-- It never hurts a submission: M.place runs in pcall, never rejects, and
-- leaves the job unchanged whenever anything is unknown (no table, a
-- broken or stale one, a job whose demand its description does not settle).
-- It runs under slurmctld's locks: the only I/O is the table's first 128
-- bytes at most once a second (os.time), and the whole file only when its
-- `written` line changed. Each reason for leaving jobs unchanged is logged
-- at most once a minute; placing a job logs nothing.
--
-- Runs on Lua 5.1 to 5.4. Defines no global: its one cache is M.cache.

local M = {}

M.FORMAT = "slurm-drf-placement/1"
M.DEFAULT_TABLE = "/var/lib/slurm-drf/placement.txt"
-- The daemon bounds a table: at most 2,500 points a pool and one line per
-- listed account, some 40 bytes a line (10 pools of 2,500 points and 5,000
-- accounts: 3 MiB). It is parsed under slurmctld's locks at some 8 MiB a
-- second (Lua 5.1 to 5.4), once per new table: past this cap a file is not
-- the daemon's, and reading it would stall slurmctld for a second or more.
M.MAX_TABLE_BYTES = 4 * 1024 * 1024
M.HEADER_BYTES = 128 -- enough for the first two lines, whatever `written` holds
M.LOG_EVERY = 60 -- seconds between two log lines of one reason

-- Slurm's sentinels as the plugin pushes them (lua_pushnumber: doubles).
local NO_VAL = 4294967294 -- 0xfffffffe
local NO_VAL16 = 65534 -- 0xfffe
local MEM_PER_CPU = 2 ^ 63 -- the flag bit of pn_min_memory
local NO_VAL64 = 2 ^ 64 - 4096 -- NO_VAL64 and INFINITE64 both arrive as 2^64; anything this large is unset
local EXACT = 2 ^ 53 -- integers past this are not exact in a double
local NICE_OFFSET = 2147483648 -- 0x80000000, when slurm.NICE_OFFSET is absent

-- The cache: what survives between two submissions (one Lua state per
-- job_submit.lua load; slurmctld makes a new one when the script changes).
M.cache = {
	path = M.DEFAULT_TABLE, -- the table's file
	checked = nil, -- the os.time() second of the last header check
	written = nil, -- `written` of the file last read, parsed or refused
	table = nil, -- the parsed table, or nil
	refusal = nil, -- why there is no table: {key, level, message}
	since = {}, -- [pool][account, or "account user" in a tree pool] = demand placed since the table was read
	points = {}, -- [pool] = {levels, values}: the table's points and the jobs placed since
	logged = {}, -- [reason key] = os.time() of its last log line
	options = {}, -- slurm.conf's global memory settings (M.configure)
	users = {}, -- [uid] = user name, read once per uid (job_desc.user_name asks the system's user database)
}

-- ------------------------------------------------------------------------
-- Small helpers

local Refusal = {} -- metatable marking a reason raised with `refuse`

local function refuse(message)
	error(setmetatable({ message = message }, Refusal), 0)
end

-- f(...) as (value, reason): a refusal becomes (nil, its message); any other
-- error is raised again (place's pcall logs it).
local function settle(f, ...)
	local results = { pcall(f, ...) }
	if results[1] then
		return results[2], results[3]
	end
	local problem = results[2]
	if getmetatable(problem) == Refusal then
		return nil, problem.message
	end
	error(problem, 0)
end

-- A numeric job_desc field: nil when unset (nil or its NO_VAL sentinel).
local function number(job_desc, name, sentinel)
	local value = job_desc[name]
	if value == nil or value == sentinel then
		return nil
	end
	if type(value) ~= "number" or value ~= value or value < 0 or value >= EXACT then
		refuse(name .. " is " .. tostring(value) .. ", not a count")
	end
	return value
end

local function text(job_desc, name)
	local value = job_desc[name]
	if value == nil or value == "" then
		return nil
	end
	if type(value) ~= "string" then
		refuse(name .. " is not a string")
	end
	return value
end

local function split(line, separator)
	local out = {}
	for field in string.gmatch(line, "[^" .. separator .. "]+") do
		out[#out + 1] = field
	end
	return out
end

local function trim(s)
	return (string.gsub(s, "^%s*(.-)%s*$", "%1"))
end

local function format_count(value)
	return string.format("%.0f", value)
end

-- ------------------------------------------------------------------------
-- GRES in tres_per_job / tres_per_node / tres_per_task / tres_per_socket
--
-- 22.05 writes `gres:gpu:2`, `gres:gpu:a100:2` (sbatch's --gpus*, --gres);
-- 23.02+ `gres/gpu:2`; 23.11+ also `cpu=4` and `gres/gpu:a100=1` in
-- tres_per_task. Read as slurm_drf/slurm/parse/amounts.py reads them.

local COUNT_SUFFIX = { [""] = 1, k = 1024, m = 1024 ^ 2, g = 1024 ^ 3, t = 1024 ^ 4, p = 1024 ^ 5 }
-- Entries that are not GRES (the reader's _NOT_GRES_PREFIXES).
local NOT_GRES = { "cpu", "mem", "node", "billing", "license", "energy", "fs/", "bb/", "vmem" }

local function gres_count(s)
	local digits, suffix = string.match(s, "^%s*([0-9]+)%s*([KkMmGgTtPp]?)%s*$")
	if digits == nil or #digits > 15 then
		return nil
	end
	return tonumber(digits) * COUNT_SUFFIX[string.lower(suffix)]
end

-- Calls visit(i, c) for each character of s outside parentheses (GRES's
-- "gpu:2(IDX:0,1)" holds commas of its own), in order.
local function outside_parentheses(s, visit)
	local depth = 0
	for i = 1, #s do
		local c = string.sub(s, i, i)
		if c == "(" then
			depth = depth + 1
		elseif c == ")" then
			depth = math.max(depth - 1, 0)
		elseif depth == 0 then
			visit(i, c)
		end
	end
end

local function without_parentheses(s)
	local out = {}
	outside_parentheses(s, function(_, c)
		out[#out + 1] = c
	end)
	return table.concat(out)
end

local function top_level_items(s)
	local out, start = {}, 1
	outside_parentheses(s, function(i, c)
		if c == "," then
			out[#out + 1] = string.sub(s, start, i - 1)
			start = i + 1
		end
	end)
	out[#out + 1] = string.sub(s, start)
	return out
end

-- The GRES of one string: a list of {name, type or "", count}.
local function parse_gres(field, value)
	local out = {}
	for _, raw in ipairs(top_level_items(value)) do
		local item = trim(without_parentheses(raw))
		local lowered = string.lower(item)
		local skip = item == "" or lowered == "(null)" or lowered == "n/a" or lowered == "none"
		if not skip then
			if string.sub(lowered, 1, 5) == "gres:" or string.sub(lowered, 1, 5) == "gres/" then
				item = string.sub(item, 6)
			else
				for _, prefix in ipairs(NOT_GRES) do
					if string.sub(lowered, 1, #prefix) == prefix then
						skip = true
					end
				end
			end
		end
		if not skip then
			local parts, count
			local head, tail = string.match(item, "^(.*)=([^=]*)$")
			if head then
				parts, count = split(head, ":"), gres_count(tail)
			else
				parts = split(item, ":")
				count = #parts > 1 and gres_count(parts[#parts]) or nil
				if count then
					parts[#parts] = nil
				else
					count = 1 -- a GRES named without a count is one of it
				end
			end
			local kept = {}
			for _, part in ipairs(parts) do
				if string.lower(part) ~= "no_consume" then
					kept[#kept + 1] = part
				end
			end
			if count == nil or #kept == 0 or #kept > 2 then
				refuse(field .. ": cannot read GRES '" .. trim(raw) .. "'")
			end
			out[#out + 1] = { name = kept[1], type = kept[2] or "", count = count }
		end
	end
	return out
end

-- ------------------------------------------------------------------------
-- The job's demand, as slurmctld counts a pending job's TRES (22.05:
-- validate_job_create_req, _job_create, job_get_tres_mem and
-- gres_ctld_set_job_tres_cnt in src/slurmctld; the same on 24.11, where the
-- client already folds --cpus-per-gpu into min_cpus) and as `squeue --json`
-- then reports it in tres_req_str.

-- The job's partitions: its comma list, else the default one of part_list.
function M.partitions(job_desc, part_list)
	local given = text(job_desc, "partition")
	if given then
		local names = {}
		for _, name in ipairs(split(given, ",")) do
			name = trim(name)
			if name ~= "" then
				names[#names + 1] = name
			end
		end
		if #names == 0 then
			return nil, "no partition in '" .. given .. "'"
		end
		return names
	end
	local default
	for name, part in pairs(part_list or {}) do
		local flag = part.flag_default
		if type(flag) == "number" and flag ~= 0 then
			if default then
				return nil, "two default partitions"
			end
			default = type(part.name) == "string" and part.name or name
		end
	end
	if default == nil then
		return nil, "no partition given and none is the default"
	end
	return { default }
end

-- Array indices ("0-99%4", "1,3,5-7", "0-15:4") -> how many distinct
-- tasks (Slurm keeps them in a bitmap); 1 for no array.
local MAX_STEPPED = 100000 -- indices of stepped ranges counted one by one
function M.array_size(array_inx)
	if array_inx == nil or array_inx == "" then
		return 1
	end
	if type(array_inx) ~= "string" then
		return nil, "array_inx is not a string"
	end
	local unreadable = "cannot read array '" .. string.sub(array_inx, 1, 60) .. "'"
	local body = string.match(array_inx, "^([^%%]*)%%[0-9]+$") or array_inx
	local ranges, stepped, naive = {}, {}, 0
	for _, item in ipairs(top_level_items(body)) do
		local first, last, step = string.match(item, "^([0-9]+)%-([0-9]+):([0-9]+)$")
		if not first then
			step = "1"
			first, last = string.match(item, "^([0-9]+)%-([0-9]+)$")
		end
		if not first then
			first = string.match(item, "^([0-9]+)$")
			last = first
		end
		if not first or #first > 9 or #last > 9 or #step > 9 then
			return nil, unreadable
		end
		first, last, step = tonumber(first), tonumber(last), tonumber(step)
		if last < first or step < 1 then
			return nil, unreadable
		end
		if step == 1 or first == last then
			ranges[#ranges + 1] = { first, last }
		else
			naive = naive + math.floor((last - first) / step) + 1
			if naive > MAX_STEPPED then
				return nil, "array '" .. string.sub(array_inx, 1, 60) .. "' too large to count"
			end
			stepped[#stepped + 1] = { first, last, step }
		end
	end
	table.sort(ranges, function(a, b)
		return a[1] < b[1]
	end)
	local merged, count = {}, 0
	for _, range in ipairs(ranges) do
		local previous = merged[#merged]
		if previous and range[1] <= previous[2] + 1 then
			previous[2] = math.max(previous[2], range[2])
		else
			merged[#merged + 1] = { range[1], range[2] }
		end
	end
	for _, range in ipairs(merged) do
		count = count + range[2] - range[1] + 1
	end
	local function in_merged(index) -- a binary search of the disjoint, sorted spans
		local low, high = 1, #merged
		while low <= high do
			local middle = math.floor((low + high) / 2)
			if index < merged[middle][1] then
				high = middle - 1
			elseif index > merged[middle][2] then
				low = middle + 1
			else
				return true
			end
		end
		return false
	end
	local seen = {}
	for _, range in ipairs(stepped) do
		for index = range[1], range[2], range[3] do
			if not seen[index] and not in_merged(index) then
				seen[index], count = true, count + 1
			end
		end
	end
	return count
end

-- The job's GRES as slurmctld's records: [name .. ":" .. type] = total.
local function gres_totals(job_desc, nodes, tasks)
	local per_node = text(job_desc, "tres_per_node")
	local gres = text(job_desc, "gres") -- the plugin's alias of tres_per_node since 18.08
	if gres and gres ~= per_node then
		if per_node then
			refuse("gres and tres_per_node differ")
		end
		per_node = gres
	end
	local sources = {
		{ "tres_per_job", text(job_desc, "tres_per_job") },
		{ "tres_per_node", per_node },
		{ "tres_per_socket", text(job_desc, "tres_per_socket") },
		{ "tres_per_task", text(job_desc, "tres_per_task") },
	}
	local records, order = {}, {}
	for _, source in ipairs(sources) do
		if source[2] then
			for _, item in ipairs(parse_gres(source[1], source[2])) do
				local key = item.name .. ":" .. item.type
				if records[key] == nil then
					records[key] = { name = item.name, type = item.type }
					order[#order + 1] = key
				end
				records[key][source[1]] = item.count
			end
		end
	end
	local sockets = number(job_desc, "sockets_per_node", NO_VAL16)
	local totals, names = {}, {}
	for _, key in ipairs(order) do
		local record = records[key]
		local by_job, by_node = record.tres_per_job, record.tres_per_node
		local by_socket, by_task = record.tres_per_socket, record.tres_per_task
		if by_job and by_node and nodes ~= by_job / by_node then
			refuse("--gpus with --gpus-per-node: slurmctld sets the node count")
		end
		local total = math.max(by_job or 0, (by_node or 0) * nodes)
		if by_socket then
			if sockets == nil then
				refuse("GRES per socket without --sockets-per-node")
			end
			total = math.max(total, by_socket * nodes * sockets)
		end
		if by_task then
			if tasks == nil and by_job == nil then
				refuse("GRES per task without a task count")
			end
			total = math.max(total, by_task * (tasks or 1))
		end
		local kinds = names[record.name] or {}
		kinds[record.type == "" and "untyped" or "typed"] = true
		if kinds.untyped and kinds.typed then
			refuse("GRES " .. record.name .. " asked for both with and without a type")
		end
		names[record.name] = kinds
		totals[key] = total
	end
	return totals, records, names
end

-- A partition's default memory: {per = "cpu" | "node", amount}; amount 0: the whole node.
local function default_memory(part, options)
	if type(part.def_mem_per_cpu) == "number" then
		return { per = "cpu", amount = part.def_mem_per_cpu }
	end
	local per_node = part.def_mem_per_node
	if type(per_node) == "number" and per_node > 0 and per_node < NO_VAL64 then
		return { per = "node", amount = per_node }
	end
	if options.def_mem_per_cpu then
		return { per = "cpu", amount = options.def_mem_per_cpu }
	end
	return { per = "node", amount = options.def_mem_per_node or 0 }
end

local function partition_records(job_desc, part_list)
	local names, reason = M.partitions(job_desc, part_list)
	if names == nil then
		refuse(reason)
	end
	local parts = {}
	for _, name in ipairs(names) do
		local part = part_list and part_list[name]
		if part == nil then
			refuse("partition " .. name .. " is not among the user's")
		end
		parts[#parts + 1] = part
	end
	return parts
end

-- The job's own memory request: {per, amount} or nil.
local function requested_memory(job_desc)
	local per_cpu = number(job_desc, "min_mem_per_cpu", nil)
	local per_node = number(job_desc, "min_mem_per_node", nil)
	if per_cpu then
		return { per = "cpu", amount = per_cpu }
	end
	if per_node then
		return { per = "node", amount = per_node }
	end
	local packed = job_desc.pn_min_memory -- a release without the two fields above
	if type(packed) ~= "number" or packed >= NO_VAL64 then
		return nil
	end
	if packed >= MEM_PER_CPU then
		refuse("per-CPU memory only in pn_min_memory (not exact as a double)")
	end
	return { per = "node", amount = packed }
end

local function memory_demand(job_desc, part_list, options, cpus, nodes, tasks, gres)
	local request = requested_memory(job_desc)
	local per_gpu = text(job_desc, "mem_per_tres")
	if request then
		if request.amount == 0 then
			refuse("--mem=0: all of a node's memory")
		end
		if request.per == "cpu" then
			for _, part in ipairs(partition_records(job_desc, part_list)) do
				local limit = part.max_mem_per_cpu -- set with the MEM_PER_CPU flag only
				local per_node = part.max_mem_per_node -- else shown, 0 when unset
				if type(limit) ~= "number" and not (type(per_node) == "number" and per_node > 0) then
					limit = options.max_mem_per_cpu -- slurm.conf's, which the partition inherits
				end
				if type(limit) == "number" and limit > 0 and request.amount > limit then
					refuse("--mem-per-cpu past MaxMemPerCPU: slurmctld raises the CPU count")
				end
			end
			return request.amount * cpus()
		end
		return request.amount * nodes
	end
	if per_gpu then -- job_get_tres_mem: mem_per_gres times the GRES asked (cons_tres)
		local items = parse_gres("mem_per_tres", per_gpu)
		local records = gres()[2]
		if #items ~= 1 or items[1].type ~= "" then
			refuse("mem_per_tres '" .. per_gpu .. "' is not one untyped GRES")
		end
		local record = records[items[1].name .. ":"]
		if record == nil then
			refuse("--mem-per-gpu without an untyped GPU request")
		end
		local per_job = record.tres_per_job
		if per_job == nil and record.tres_per_task and tasks then
			per_job = record.tres_per_task * tasks -- _test_gres_cnt sets gres_per_job so
		end
		local sockets = number(job_desc, "sockets_per_node", NO_VAL16)
		local count = per_job
			or (record.tres_per_node and record.tres_per_node * nodes)
			or (record.tres_per_socket and record.tres_per_socket * nodes * sockets)
		return items[1].count * count
	end
	local chosen
	for _, part in ipairs(partition_records(job_desc, part_list)) do
		local memory = default_memory(part, options)
		if chosen and (chosen.per ~= memory.per or chosen.amount ~= memory.amount) then
			refuse("the job's partitions have different default memory")
		end
		chosen = memory
	end
	if chosen.amount == 0 then
		refuse("no memory asked and no default known: all of a node's memory")
	end
	return chosen.amount * (chosen.per == "cpu" and cpus() or nodes)
end

local function has(list, wanted)
	for _, item in ipairs(list) do
		if item == wanted then
			return true
		end
	end
	return false
end

local function demand_of(job_desc, part_list, resources, options)
	options = options or M.cache.options
	if text(job_desc, "req_nodes") then
		refuse("--nodelist: slurmctld counts its nodes")
	end
	local shared = number(job_desc, "shared", NO_VAL16)
	if shared ~= nil and shared ~= 1 then
		refuse("--exclusive (shared " .. format_count(shared) .. "): the job takes whole nodes")
	end
	for _, part in ipairs(partition_records(job_desc, part_list)) do
		if part.max_share == 0 then
			refuse("an OverSubscribe=EXCLUSIVE partition: the job takes whole nodes")
		end
	end
	if number(job_desc, "ntasks_per_tres", NO_VAL16) then
		refuse("--ntasks-per-gpu: slurmctld sets the task count")
	end

	-- Nodes and tasks (validate_job_create_req, then _validate_job_desc).
	local min_nodes = number(job_desc, "min_nodes", NO_VAL)
	local tasks = number(job_desc, "num_tasks", NO_VAL)
	local per_node_tasks = number(job_desc, "ntasks_per_node", NO_VAL16)
	if tasks == nil and per_node_tasks and min_nodes then
		tasks = per_node_tasks * min_nodes
	end
	local nodes = min_nodes or 1

	-- CPUs: min_cpus, raised to tasks x cpus_per_task unless --overcommit,
	-- which job_submit/lua does not show: leave what it would decide.
	-- Settled only when counted (cpu, or memory per CPU).
	local function cpus()
		local min_cpus = number(job_desc, "min_cpus", NO_VAL)
		local per_task = number(job_desc, "cpus_per_task", NO_VAL16)
		if min_cpus == nil then
			if tasks ~= nil or per_task ~= nil then
				refuse("no min_cpus: 22.05 and 24.11 count such a job's CPUs differently")
			end
			return nodes
		end
		if tasks ~= nil and tasks > min_cpus then
			refuse("more tasks than min_cpus (--overcommit?): the CPU count depends on a field job_submit/lua hides")
		end
		return min_cpus
	end
	local settled
	local function gres()
		settled = settled or { gres_totals(job_desc, nodes, tasks) }
		return settled
	end

	local vector = {}
	for index, resource in ipairs(resources) do
		local amount
		if resource == "cpu" then
			amount = cpus()
		elseif resource == "node" then
			amount = nodes
		elseif resource == "mem" then
			amount = memory_demand(job_desc, part_list, options, cpus, nodes, tasks, gres)
		elseif string.sub(resource, 1, 5) == "gres/" then
			local name, kind = string.match(string.sub(resource, 6), "^([^:]+):?(.*)$")
			local totals, names = gres()[1], gres()[3]
			amount = 0
			if kind == "" then
				for key, total in pairs(totals) do
					if string.match(key, "^([^:]*)") == name then
						amount = amount + total
					end
				end
			else
				amount = totals[name .. ":" .. kind] or 0
				if names[name] and names[name].untyped and not has(resources, "gres/" .. name) then
					refuse("untyped " .. name .. " counted by type: slurmctld picks a type")
				end
			end
		else
			refuse("resource " .. resource .. " is not one a job's description settles")
		end
		if amount >= EXACT then
			refuse(resource .. " past 2^53")
		end
		vector[index] = amount
	end
	return vector
end

-- The job's demand for `resources` (the table's), one task of an array:
-- a list of amounts in their order, or nil and why.
function M.demand(job_desc, part_list, resources, options)
	return settle(demand_of, job_desc, part_list, resources, options)
end

-- ------------------------------------------------------------------------
-- The table (docs/formats.md): strict; any line off the grammar refuses it.

local NAME = "^[A-Za-z0-9._-]+$"
local RESOURCE = "^[A-Za-z0-9._/:-]+$"
local MODES = { nice = true, site_factor = true, priority = true }
local POOL_LINES = { "partitions", "capacity", "default_weight", "range", "gap" }
local RANK = { tree = 1, node = 2, step = 3, home = 4, account = 5, exclude = 6, point = 7 }
local TREE_LINES = { node = true, step = true, home = true }

local function real(s)
	if
		string.find(s, "^%-?[0-9]+$")
		or string.find(s, "^%-?[0-9]+%.[0-9]+$")
		or string.find(s, "^%-?[0-9]+[eE][-+]?[0-9]+$")
		or string.find(s, "^%-?[0-9]+%.[0-9]+[eE][-+]?[0-9]+$")
	then
		local value = tonumber(s)
		if value and value == value and value > -math.huge and value < math.huge then
			return value
		end
	end
	return nil
end

local function integer(s)
	if string.find(s, "^%-?[0-9]+$") and #s <= 17 then
		local value = tonumber(s)
		if value and value > -EXACT and value < EXACT then
			return value
		end
	end
	return nil
end

local function counts(f, first, n)
	local out = {}
	for i = first, #f do
		out[i - first + 1] = integer(f[i])
		if not out[i - first + 1] or out[i - first + 1] < 0 then
			return nil, "usage '" .. f[i] .. "' is not a count"
		end
	end
	if #out ~= n then
		return nil, "usage of " .. #out .. " resources, not " .. n
	end
	return out
end

-- A `step ID KEY SHARE` line's fields (`count` of them in all): nil, or what is wrong.
local function tree_step(tree, id, key, share, count)
	local node = tree.nodes[integer(id or "") or -1]
	key, share = count == 4 and real(key), count == 4 and real(share)
	if not node or not key or not share or key < 0 or share < 0 then
		return "expected `step ID KEY SHARE` of a listed node, KEY and SHARE >= 0"
	end
	local k = #node.keys
	if k > 0 and (key < node.keys[k] or share < node.shares[k]) then
		return "a node's steps decrease"
	end
	node.keys[k + 1], node.shares[k + 1] = key, share
end

-- A tree pool's lines (`tree`, `node`, `step`, `home`): nil, or what is wrong.
local function tree_entry(t, pool, f)
	local kind, tree = f[1], pool.tree
	if kind == "tree" then
		if tree or #f ~= 2 or (f[2] ~= "user" and f[2] ~= "slurm") then
			return "expected `tree user|slurm`, once"
		end
		pool.tree = { by_user = f[2] == "user", nodes = {}, leaves = {}, homes = {} }
		return nil
	end
	if tree == nil then
		return "`" .. kind .. "` before `tree`"
	end
	if kind == "node" then
		local id, parent = #f >= 5 and integer(f[2]), #f >= 5 and integer(f[3])
		local weight, done = #f >= 5 and real(f[4]), #f >= 5 and real(f[5])
		if not id or id ~= #tree.nodes + 1 or not parent or parent < 0 or parent >= id then
			return "expected `node ID PARENT W DONE [ACCOUNT USER U1 ...]`, ID the next number, PARENT before it"
		end
		if not weight or weight <= 0 or not done or done < 0 then
			return "expected `node ID PARENT W DONE [ACCOUNT USER U1 ...]`, W > 0, DONE >= 0"
		end
		local node = { parent = parent, weight = weight, done = done, keys = {}, shares = {} }
		tree.nodes[id] = node
		if #f > 5 then -- a leaf: ACCOUNT's USER (`*`: all the account's jobs) and its usage
			if #f < 7 or not string.find(f[6], NAME) or not (f[7] == "*" or string.find(f[7], NAME)) then
				return "expected a leaf's `ACCOUNT USER U1 ...` after DONE"
			end
			local usage, why = counts(f, 8, #t.resources)
			if usage == nil then
				return why
			end
			local who = f[6] .. " " .. f[7]
			if tree.leaves[who] then
				return "leaf " .. who .. " repeated"
			end
			tree.leaves[who] = { node = node, usage = usage }
		end
	elseif kind == "step" then
		return tree_step(tree, f[2], f[3], f[4], #f)
	else
		local home = #f == 3 and tree.nodes[integer(f[3]) or -1]
		if not home or not string.find(f[2], NAME) or tree.homes[f[2]] then
			return "expected `home ACCOUNT ID` of a listed node, once an account"
		end
		tree.homes[f[2]] = home
	end
end

-- One line of a pool past its fixed lines: nil, or what is wrong with it.
local function pool_entry(t, pool, f)
	local kind = f[1]
	if kind == "point" then
		local level, value = #f == 3 and real(f[2]), #f == 3 and integer(f[3])
		if not level or not value then
			return "expected `point LEVEL VALUE`"
		end
		local k = #pool.levels
		if k > 0 and level < pool.levels[k] then
			return "levels decrease"
		end
		local previous = k > 0 and pool.values[k] or value
		if (pool.best <= pool.worst and value < previous) or (pool.best > pool.worst and value > previous) then
			return "values turn back towards BEST"
		end
		pool.levels[k + 1], pool.values[k + 1] = level, value
	elseif kind == "tree" or TREE_LINES[kind] then
		return tree_entry(t, pool, f)
	elseif kind == "account" then
		if pool.tree then
			return "`account` in a tree pool"
		end
		local weight = #f >= 3 and real(f[3])
		if not string.find(f[2] or "", NAME) or not weight or weight <= 0 then
			return "expected `account NAME W U1 ...`, W > 0"
		end
		if #f ~= #t.resources + 3 then
			return "usage of " .. (#f - 3) .. " resources, not " .. #t.resources
		end
		if pool.accounts[f[2]] or pool.excluded[f[2]] then
			return "account " .. f[2] .. " repeated"
		end
		local usage, why = counts(f, 4, #t.resources)
		if usage == nil then
			return why
		end
		pool.accounts[f[2]] = { weight = weight, usage = usage }
	else
		if #f ~= 2 or not string.find(f[2], NAME) or pool.accounts[f[2]] or pool.excluded[f[2]] then
			return "expected `exclude NAME`, once, of an unlisted account"
		end
		pool.excluded[f[2]] = true
	end
end

-- One of a pool's fixed lines (POOL_LINES, in order): nil, or what is wrong with it.
local function pool_setting(t, pool, f)
	local kind = f[1]
	if kind == "partitions" then
		for i = 2, #f do
			if not string.find(f[i], NAME) or t.pool_of[f[i]] then
				return "partition '" .. f[i] .. "' malformed or in two pools"
			end
			t.pool_of[f[i]] = pool
			pool.partitions[i - 1] = f[i]
		end
	elseif kind == "capacity" then
		if #f ~= #t.resources + 1 then
			return "capacity of " .. (#f - 1) .. " resources, not " .. #t.resources
		end
		for i = 2, #f do
			local value = integer(f[i])
			if not value or value < 0 then
				return "capacity '" .. f[i] .. "' is not a count"
			end
			pool.capacity[i - 1] = value
		end
	elseif kind == "default_weight" then
		pool.default_weight = #f == 2 and real(f[2])
		if not pool.default_weight or pool.default_weight <= 0 then
			return "expected `default_weight W`, W > 0"
		end
	elseif kind == "range" then
		pool.best, pool.worst = #f == 3 and integer(f[2]), #f == 3 and integer(f[3])
		if not pool.best or not pool.worst then
			return "expected `range BEST WORST`"
		end
	else
		pool.gap = #f == 2 and integer(f[2])
		if not pool.gap or pool.gap < 1 then
			return "expected `gap G`, G >= 1"
		end
	end
end

-- The five header lines: nil, or what is wrong with line n.
local function header(t, n, line, f)
	local kind = f[1]
	if n == 1 then
		if line ~= M.FORMAT then
			return "unknown format '" .. string.sub(line, 1, 40) .. "'"
		end
	elseif n == 2 then
		t.written = kind == "written" and #f == 2 and real(f[2])
		if not t.written then
			return "expected `written T`"
		end
	elseif n == 3 then
		t.stale_after = kind == "stale_after" and #f == 2 and real(f[2])
		if not t.stale_after or t.stale_after < 0 then
			return "expected `stale_after S`, S >= 0"
		end
	elseif n == 4 then
		if kind ~= "mode" or #f ~= 2 or not MODES[f[2]] then
			return "expected `mode nice|site_factor|priority`"
		end
		t.mode = f[2]
	else
		if kind ~= "resources" or #f < 2 then
			return "expected `resources R1 ...`"
		end
		local seen = {}
		for i = 2, #f do
			if not string.find(f[i], RESOURCE) or seen[f[i]] then
				return "resource '" .. f[i] .. "' malformed or repeated"
			end
			seen[f[i]] = true
			t.resources[i - 1] = f[i]
		end
	end
end

local function new_pool(t, f)
	if t.mode == "priority" then
		return nil, "a pool in priority mode"
	end
	if #f ~= 2 or not string.find(f[2], NAME) then
		return nil, "expected `pool NAME`"
	end
	for _, other in ipairs(t.pools) do
		if other.name == f[2] then
			return nil, "pool " .. f[2] .. " repeated"
		end
	end
	local pool = { name = f[2], partitions = {}, capacity = {}, accounts = {}, excluded = {}, levels = {}, values = {} }
	t.pools[#t.pools + 1] = pool
	return pool
end

-- Parses a table's text: the table, or nil and a one-line reason naming the line.
function M.parse_table(text)
	if type(text) ~= "string" then
		return nil, "line 1: not text"
	end
	if string.sub(text, -1) ~= "\n" then
		local _, ends = string.gsub(text, "\n", "")
		return nil, "line " .. (ends + 1) .. ": no line end: cut short"
	end
	local t = { resources = {}, pools = {}, pool_of = {} }
	local pool, step, rank, ended -- the current pool, its next fixed line, its last entry's RANK
	local n, position = 0, 1
	while position <= #text do
		local stop = string.find(text, "\n", position, true)
		local line = string.sub(text, position, stop - 1)
		position, n = stop + 1, n + 1
		local why
		-- Most lines are points: read them without the general checks (the
		-- match admits one space between fields, `real`/`integer` only digits).
		local level, value, id
		if rank == RANK.point and not ended then
			level, value = string.match(line, "^point ([^ ]+) ([^ ]+)$")
		elseif rank == RANK.step and not ended then
			id, level, value = string.match(line, "^step ([^ ]+) ([^ ]+) ([^ ]+)$")
		end
		if id then
			why = tree_step(pool.tree, id, level, value, 4)
		elseif level then
			why = pool_entry(t, pool, { "point", level, value })
		elseif ended then
			why = "a line after `end`"
		elseif string.find(line, "[^ -~]") then
			why = "a character outside printable ASCII"
		elseif line == "" or string.find(line, "  ", 1, true) or string.find(line, "^ ") or string.find(line, " $") then
			why = "empty, or fields not one space apart"
		else
			local f = split(line, " ")
			local kind = f[1]
			if n <= 5 then
				why = header(t, n, line, f)
			elseif kind == "pool" or kind == "end" then
				if pool and step <= #POOL_LINES then
					why = "pool " .. pool.name .. " lacks `" .. POOL_LINES[step] .. "`"
				elseif kind == "pool" then
					pool, why = new_pool(t, f)
					step, rank = 1, 0
				elseif #f ~= 2 or integer(f[2]) ~= n - 1 then
					why = "`end` does not count the " .. (n - 1) .. " lines before it"
				else
					ended = true
				end
			elseif pool == nil then
				why = "`" .. string.sub(kind, 1, 20) .. "` outside a pool"
			elseif step <= #POOL_LINES then
				if kind == POOL_LINES[step] then
					why, step = pool_setting(t, pool, f), step + 1
				else
					why = "expected `" .. POOL_LINES[step] .. "`"
				end
			elseif RANK[kind] == nil then
				why = "unknown line `" .. string.sub(kind, 1, 20) .. "`"
			elseif RANK[kind] < rank then
				why = "`" .. kind .. "` out of order in the pool"
			else
				rank = RANK[kind]
				why = pool_entry(t, pool, f)
			end
		end
		if why then
			return nil, "line " .. n .. ": " .. why
		end
	end
	if not ended then
		return nil, "line " .. (n + 1) .. ": no `end N`: cut short"
	end
	return t
end

-- ------------------------------------------------------------------------
-- Logging: each reason at most once a minute.

local function note(key, level, message)
	local now = os.time()
	local last = M.cache.logged[key]
	if last and now - last < M.LOG_EVERY and now >= last then
		return
	end
	M.cache.logged[key] = now
	pcall(function()
		local log = slurm and (level == "error" and slurm.log_error or slurm.log_info)
		if log then
			log("%s", "slurm-drf: " .. message .. "; the job is left to the daemon's next cycle")
		end
	end)
end

-- ------------------------------------------------------------------------
-- The table as of now: its header read at most once a second, the whole
-- file only when `written` changed.

local function refused(key, level, message)
	M.cache.table, M.cache.refusal = nil, { key, level, message }
end

local function adopt(parsed)
	M.cache.table, M.cache.refusal = parsed, nil
	M.cache.since, M.cache.points = {}, {}
end

local function refresh()
	local cache = M.cache
	local file = io.open(cache.path, "rb")
	if file == nil then
		cache.written = nil
		return refused("missing", "info", cache.path .. ": no placement table (is slurm-drf running?)")
	end
	local ok, problem = pcall(function()
		local head = file:read(M.HEADER_BYTES) or ""
		local first, written = string.match(head, "^([^\n]*)\n([^\n]*)\n")
		if first ~= M.FORMAT then
			local shown = string.match(head, "^[ -~]*") or ""
			cache.written = nil
			return refused("format", "error", cache.path .. ": first line '" .. string.sub(shown, 1, 40) .. "' is not " .. M.FORMAT)
		end
		written = string.match(written, "^written (.*)$")
		if written == nil or real(written) == nil then
			cache.written = nil
			return refused("broken", "error", cache.path .. ": line 2: expected `written T`")
		end
		if written == cache.written then
			return -- the same table as last time (or the same refusal)
		end
		cache.written = written
		local size = file:seek("end")
		if size == nil or size > M.MAX_TABLE_BYTES then
			return refused("huge", "error", cache.path .. ": larger than " .. M.MAX_TABLE_BYTES .. " bytes")
		end
		file:seek("set", 0)
		local parsed, reason = M.parse_table(file:read("*a") or "")
		if parsed == nil then
			return refused("broken", "error", cache.path .. ": " .. reason)
		end
		adopt(parsed)
	end)
	file:close()
	if not ok then
		cache.written = nil
		refused("unreadable", "error", cache.path .. ": " .. tostring(problem))
	end
end

local function current_table(now)
	local cache = M.cache
	if cache.checked ~= now then
		cache.checked = now
		refresh()
	end
	local t = cache.table
	if t and now > t.written + t.stale_after then
		return nil, { "stale", "info", cache.path .. ": written at " .. cache.written .. ", stale since" }
	end
	return t, cache.refusal
end

-- ------------------------------------------------------------------------
-- Placing

local function value_between(low, high, gap)
	local room = math.abs(high - low)
	local step = high >= low and 1 or -1
	if room >= 2 * gap then
		return low + step * gap
	end
	return low + step * math.floor(room / 2)
end

local function level_of(usage, capacity, weight)
	local share = 0
	for r, c in ipairs(capacity) do
		if c > 0 then
			share = math.max(share, usage[r] / c)
		end
	end
	return share / weight
end

-- How many of the non-decreasing `list` are at or below `value` (a binary search).
local function count_at_or_below(list, value, strictly)
	local low, high = 1, #list + 1 -- the first entry above `value` (at or above it, `strictly`)
	while low < high do
		local middle = math.floor((low + high) / 2)
		if list[middle] > value or (strictly and list[middle] == value) then
			high = middle
		else
			low = middle + 1
		end
	end
	return low - 1
end

-- A node's share at the turn of a child of level `key` (docs/formats.md `node`, `step`).
local function share_at(node, key, child_done, child_weight)
	local keys, shares = node.keys, node.shares
	local after, base = count_at_or_below(keys, key), nil
	if after < 1 then
		base = shares[1] or 0
	elseif after >= #keys then
		base = node.done
	else
		local low_key, low = keys[after], shares[after]
		local high_key, high = keys[after + 1], shares[after + 1]
		if high_key == low_key then
			base = low
		else
			base = low + (key - low_key) * (high - low) / (high_key - low_key)
		end
	end
	return base + math.max(0, key - child_done) * child_weight / node.weight
end

-- A user of a known account (users as leaves) with nothing running and nothing placed since the table.
local function holds_nothing(tree, account, who, added)
	if not tree.by_user then
		return false
	end
	local leaf = tree.leaves[who]
	for r = 1, #added do
		if added[r] ~= 0 or (leaf and leaf.usage[r] ~= 0) then
			return false
		end
	end
	return leaf ~= nil or tree.homes[account] ~= nil
end

-- A job's level in a tree pool (docs/rule.md §8): its leaf's, or as a new child of its account's
-- home, then up the tree to the root's child, each parent's share at the child's turn.
local function tree_level(pool, account, who, added)
	local tree = pool.tree
	local leaf, node, level = tree.leaves[who], nil, nil
	if leaf then
		node = leaf.node
		local total = {}
		for r = 1, #added do
			total[r] = leaf.usage[r] + added[r]
		end
		level = level_of(total, pool.capacity, node.weight)
	else
		node = tree.homes[account]
		if node == nil then
			return level_of(added, pool.capacity, pool.default_weight)
		end
		level = share_at(node, level_of(added, pool.capacity, 1), 0, 1)
	end
	while node.parent ~= 0 do
		local parent = tree.nodes[node.parent]
		level = share_at(parent, level, node.done, node.weight)
		node = parent
	end
	return level
end

-- The submitting user's name, asked of the system once per uid (job_desc.user_name looks it up).
local function user_of(job_desc)
	local uid = job_desc.user_id
	local name = uid ~= nil and M.cache.users[uid]
	if not name then
		name = text(job_desc, "user_name") or "?"
		if uid ~= nil then
			M.cache.users[uid] = name
		end
	end
	return name
end

local function pool_of(t, names)
	local pool
	for _, name in ipairs(names) do
		local found = t.pool_of[name]
		if found == nil then
			return nil, "partition " .. name .. " is in no pool of the table"
		end
		if pool and found ~= pool then
			return nil, "partitions " .. table.concat(names, ",") .. " span pools"
		end
		pool = found
	end
	return pool
end

local function place_job(job_desc, part_list)
	local nice = job_desc.nice
	if nice ~= nil and nice ~= NO_VAL then
		return -- the user's own nice: the daemon leaves it too
	end
	local priority = job_desc.priority
	if priority ~= nil and priority ~= NO_VAL then
		return -- held (0), or a priority an operator set
	end
	local offset = job_desc.het_job_offset
	if offset ~= nil and offset ~= NO_VAL then
		return note("het", "info", "a heterogeneous job's components are not placed at submission")
	end
	local now = os.time()
	local t, refusal = current_table(now)
	if t == nil then
		refusal = refusal or { "missing", "info", "no table read" }
		return note(refusal[1], refusal[2], refusal[3])
	end
	if t.mode ~= "nice" and t.mode ~= "site_factor" then
		return
	end
	local names, reason = M.partitions(job_desc, part_list)
	local pool
	if names then
		pool, reason = pool_of(t, names)
	end
	if pool == nil then
		return note("partition", "info", reason)
	end
	local account = text(job_desc, "account") or text(job_desc, "default_account")
	account = account and string.lower(account)
	if account == nil or not string.find(account, NAME) then
		return note("account", "info", "account '" .. tostring(account) .. "' cannot be in the table")
	end
	if pool.excluded[account] then
		return
	end
	local demand
	demand, reason = M.demand(job_desc, part_list, t.resources)
	if demand == nil then
		return note("demand", "info", reason)
	end
	local tasks
	tasks, reason = M.array_size(job_desc.array_inx)
	if tasks == nil then
		return note("demand", "info", reason)
	end

	local who = account
	if pool.tree then
		who = account .. " " .. (pool.tree.by_user and user_of(job_desc) or "*")
	end
	local since = M.cache.since[pool.name] or {}
	M.cache.since[pool.name] = since
	local added = since[who]
	if added == nil then
		added = {}
		for r = 1, #t.resources do
			added[r] = 0
		end
		since[who] = added
	end
	local level
	if pool.tree then
		level = tree_level(pool, account, who, added)
	else
		local entry = pool.accounts[account]
		local usage = entry and entry.usage or {}
		local total = {}
		for r = 1, #t.resources do
			total[r] = (usage[r] or 0) + added[r]
		end
		level = level_of(total, pool.capacity, entry and entry.weight or pool.default_weight)
	end

	local points = M.cache.points[pool.name]
	if points == nil then
		points = { levels = {}, values = {} }
		for k = 1, #pool.levels do
			points.levels[k], points.values[k] = pool.levels[k], pool.values[k]
		end
		M.cache.points[pool.name] = points
	end
	local levels, values = points.levels, points.values
	-- A user holding nothing in an account takes the account's next turn before its waiting users (its
	-- share in the account is 0, docs/rule.md §7): before the jobs at its level, not after them.
	local first = pool.tree ~= nil and holds_nothing(pool.tree, account, who, added)
	local after = count_at_or_below(levels, level, first)
	local low = after >= 1 and values[after] or pool.best
	local high = values[after + 1] or pool.worst
	local value = value_between(low, high, pool.gap)
	if value ~= pool.worst and (value - pool.worst) * (pool.worst - pool.best) > 0 then
		-- Past WORST: a value the daemon could not tell from a nice of the user's own (docs/formats.md).
		return note("range", "info", "its place is past the last value a placed job may hold")
	end

	if t.mode == "nice" then
		local base = slurm and type(slurm.NICE_OFFSET) == "number" and slurm.NICE_OFFSET or NICE_OFFSET
		job_desc.nice = base + value
	else
		job_desc.site_factor = value -- the plugin adds NICE_OFFSET, as scontrol's SiteFactor= does
	end
	table.insert(levels, after + 1, level)
	table.insert(values, after + 1, value)
	for r = 1, #t.resources do
		added[r] = added[r] + demand[r] * tasks
	end
end

-- Places a new job: sets its nice (or site_factor) or leaves it unchanged.
-- Never raises, returns nothing; the caller returns slurm.SUCCESS.
function M.place(job_desc, part_list, submit_uid)
	local ok, problem = pcall(place_job, job_desc, part_list, submit_uid)
	if not ok then
		pcall(function()
			local message = getmetatable(problem) == Refusal and problem.message or tostring(problem)
			note("error", "error", "internal error: " .. message)
		end)
	end
end

-- configure{table = PATH, def_mem_per_cpu = MiB, def_mem_per_node = MiB,
-- max_mem_per_cpu = MiB}: the table's path, and slurm.conf's global
-- DefMemPerCPU / DefMemPerNode / MaxMemPerCPU (job_submit/lua shows only a
-- partition's own). Returns true, or false and why (never raises).
local OPTIONS = { def_mem_per_cpu = true, def_mem_per_node = true, max_mem_per_cpu = true }
function M.configure(settings)
	local ok, problem = pcall(function()
		local options = {}
		for key, value in pairs(settings or {}) do
			if key == "table" then
				if type(value) ~= "string" or value == "" then
					error("table: expected a path", 0)
				end
			elseif not OPTIONS[key] then
				error("unknown setting " .. tostring(key), 0)
			elseif type(value) ~= "number" or value < 0 or value >= EXACT or value ~= math.floor(value) then
				error(key .. ": expected MiB, a whole number >= 0", 0)
			else
				options[key] = value
			end
		end
		local cache = M.cache
		cache.path = settings and settings.table or M.DEFAULT_TABLE
		cache.options = options
		cache.checked, cache.written = nil, nil
		refused("missing", "info", "not read yet")
	end)
	if not ok then
		pcall(note, "configure", "error", "configure: " .. tostring(problem))
		return false, tostring(problem)
	end
	return true
end

return M
