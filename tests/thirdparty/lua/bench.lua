-- Work for the kernel/native time ratio (loaded with `lua -l bench`): calls, table traffic, strings,
-- floats, sorting, coroutines. Prints checksums only, so its output is compared like everything else.
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function sieve(n)
  local composite, count = {}, 0
  for i = 2, n do
    if not composite[i] then
      count = count + 1
      for j = i * i, n, i do composite[j] = true end
    end
  end
  return count
end

local function strings(n)
  local parts = {}
  for i = 1, n do parts[#parts + 1] = string.format("%d:%x:%5.2f", i, i * 7, i / 3) end
  local s = table.concat(parts, ",")
  local digits = select(2, s:gsub("%d", ""))
  local h = 0
  for w in s:gmatch("[^,]+") do h = (h * 31 + #w) % 1000000007 end
  return #s, digits, h
end

local function floats(n)
  local x, y = 0.0, 1.0
  for i = 1, n do x = x + math.sin(i) * y; y = y * 0.999999 + 1e-7 end
  return string.format("%.6f", x)
end

local function sorting(n)
  math.randomseed(12345)
  local t = {}
  for i = 1, n do t[i] = math.random(1, 1 << 30) end
  table.sort(t, function(a, b) return a > b end)
  return t[1] % 1000, t[n // 2] % 1000, t[n] % 1000
end

local function producer(n)
  local co = coroutine.wrap(function() for i = 1, n do coroutine.yield(i) end return 0 end)
  local sum = 0
  for _ = 1, n do sum = sum + co() end
  return sum
end

print("bench fib", fib(24))
print("bench sieve", sieve(200000))
print("bench strings", strings(20000))
print("bench floats", floats(100000))
print("bench sort", sorting(30000))
print("bench coroutines", producer(20000))
return true
