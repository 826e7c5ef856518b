-- capsule's Lua check: one script that exercises the language and the standard library, run natively and
-- in the kernel; stdout, stderr and the exit status must be identical. It ends with an uncaught error on
-- purpose (exit status 1 and Lua's message on stderr). Nothing here depends on addresses, time or the
-- string hash seed (no pairs() over string keys without sorting them).

local function section(name) print(("== %s"):format(name)) end

section("tables")
local t = {}
for i = 1, 20 do t[i] = i * i end
print(#t, t[1], t[20], table.concat(t, ",", 1, 5))
table.insert(t, 1, 0); table.insert(t, 441); print(#t, t[1], t[22], table.remove(t), table.remove(t, 1), #t)
local rec = {name = "capsule", kind = "kernel", n = 3, [10] = "ten", nested = {a = {b = {c = "deep"}}}}
local keys = {}
for k in pairs(rec) do keys[#keys + 1] = tostring(k) end
table.sort(keys)
print(table.concat(keys, " "), rec.nested.a.b.c, rec[10])
print(table.unpack({1, 2, 3})); print(select("#", table.unpack({1, nil, 3}, 1, 3)))
local moved = table.move({1, 2, 3, 4, 5}, 2, 4, 1); print(table.concat(moved, ","))
local mt = setmetatable({}, {__index = function(_, k) return k .. "!" end, __len = function() return 99 end})
print(mt.hello, #mt, rawlen(mt))
local V = {}
V.__index = V
V.__add = function(a, b) return setmetatable({x = a.x + b.x, y = a.y + b.y}, V) end
V.__tostring = function(v) return ("(%d, %d)"):format(v.x, v.y) end
V.__eq = function(a, b) return a.x == b.x and a.y == b.y end
local function vec(x, y) return setmetatable({x = x, y = y}, V) end
print(tostring(vec(1, 2) + vec(30, 40)), vec(1, 1) == vec(1, 1), vec(1, 1) == vec(1, 2))

section("closures")
local function counter(start)
  local n = start
  return function(step) n = n + (step or 1); return n end
end
local c1, c2 = counter(0), counter(100)
c1(); c1(); c2(5)
print(c1(), c2(), c1(10))
local adders = {}
for i = 1, 5 do adders[i] = function(x) return x + i end end
print(adders[1](10), adders[5](10))
local function compose(f, g) return function(...) return f(g(...)) end end
print(compose(function(x) return x * 2 end, function(a, b) return a + b end)(3, 4))
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
print(fib(20))
local memo = setmetatable({}, {__mode = "k"})
local function vararg(...) local n = select("#", ...); return n, ... end
print(vararg(1, nil, "x"), memo ~= nil)

section("string.format")
print(string.format("%d|%5d|%-5d|%05d|%+d", 42, 42, 42, 42, 42))
print(string.format("%s|%10s|%-10s|%.3s|%q", "abc", "right", "left", "truncate", "quo\"te\n"))
print(string.format("%5.2f|%.0f|%10.4f|%-8.1f|%f", 3.14159, 2.5, -1 / 3, 99.95, 1 / 7))
print(string.format("%g|%g|%g|%g|%g|%g", 1e20, 0.0001, 1e-5, 123456789, 2 ^ 53, -0.0))
print(string.format("%x|%X|%08x|%#x|%o", 255, 48879, 3054, 255, 8))
print(string.format("%e|%.3e|%c%c%c|%%|%i", 12345.678, 0.000123, 76, 117, 97, 7))
print(string.format("%.14g|%.17g|%g", 0.1, 0.1, 1 / 0), string.format("%g", -1 / 0), tostring(0 / 0) ~= nil)
print(tostring(1e100), tostring(2 ^ 63), tostring(-2 ^ 63), 1e15, 1e16, 123.0, -0.0)

section("integers and floats")
print(7 // 2, 7 % 3, -7 // 2, -7 % 3, 7 / 2, 2 ^ 10, 7.5 // 2, -7.5 % 2)
print(math.maxinteger, math.mininteger, math.maxinteger + 1 == math.mininteger, math.mininteger // -1)
print(3 & 5, 3 | 5, 3 ~ 5, ~0, 1 << 62, 1 << 63, 1 << 64, -1 >> 1)
print(math.type(1), math.type(1.0), math.type("1"), 1 == 1.0, math.tointeger(3.0), math.tointeger(3.5))
print(10 // 0.0, -10 // 0.0, pcall(function() return 10 // 0 end))
print(math.floor(-3.5), math.ceil(-3.5), math.abs(-7), math.max(3, 9, 1), math.min(2.5, -1), math.fmod(7, -3))
print(math.sqrt(2), math.sin(1), math.cos(1), math.exp(1), math.log(100, 10), math.log(8, 2), math.pi)
print(string.format("%.10f %.10f %.10f", math.atan(1, 2), math.log(3), 10 ^ 0.5))
print(tonumber("0x1F"), tonumber("  12  "), tonumber("1e3"), tonumber("z", 36), tonumber("10", 2), tonumber("x"))
print(8 // 3 * 3 + 8 % 3, 2 ^ -1, 100000000000000 * 100000, 0x7fffffffffffffff + 0)
local acc = 0
for i = 1, 100000 do acc = acc + i * i % 7 end
print(acc)
local f = 0.0
for i = 1, 1000 do f = f + 1 / i end
print(f, string.format("%.15f", f))
math.randomseed(42)
print(math.random(1, 100), math.random(1, 100), math.random(1000000))

section("strings")
print(string.rep("ab", 3), string.rep("x", 3, "-"), ("hello"):upper(), ("MiXeD"):lower(), #string.rep("z", 1000))
print(("hello world"):find("o w"), ("hello world"):find("o", 6), ("a.b"):find(".", 1, true), ("abc"):find("z"))
print(("key = value"):match("(%w+)%s*=%s*(%w+)"), ("2024-01-15"):match("(%d+)-(%d+)-(%d+)"))
print(("hello world from lua"):gsub("o", "0"), ("hello"):gsub("l+", function(s) return "[" .. s .. "]" end))
print(("$name is $kind"):gsub("%$(%w+)", {name = "capsule", kind = "fun"}), ("abc"):gsub("", "-"))
local words = {}
for w in ("the quick brown fox"):gmatch("%a+") do words[#words + 1] = w:reverse() end
print(table.concat(words, " "), ("  trim me  "):match("^%s*(.-)%s*$") .. "|")
print(("%bxy"):len(), ("f(a(b)c)d"):match("%b()"), ("THE (quick) fox"):find("%f[%a]%a+", 5))
print(string.byte("ABC", 1, 3), string.char(72, 105), ("abc"):sub(-2), ("abcdef"):sub(2, 4), ("x"):byte())
print(utf8.char(72, 228, 8364, 128512), utf8.len("häll€"), #utf8.char(128512))
print(tostring(nil), tostring(true), tostring(12), tostring(1.5), "10" + 5, "3" * "4", 10 .. 20)
local parts = {}
for k, v in ("a=1, b=2, c=3"):gmatch("(%w+)=(%w+)") do parts[#parts + 1] = v .. k end
print(table.concat(parts, ";"), string.pack and #string.pack("i4i8", 1, 2), ("x"):rep(0) == "")

section("table.sort")
local nums = {}
math.randomseed(7)
for i = 1, 200 do nums[i] = math.random(1, 1000) end
table.sort(nums)
local sorted = true
for i = 2, #nums do if nums[i - 1] > nums[i] then sorted = false end end
print(sorted, nums[1], nums[200])
table.sort(nums, function(a, b) return a > b end)
print(nums[1], nums[2], nums[200])
local people = {{"ann", 31}, {"bob", 25}, {"cid", 31}, {"dee", 19}, {"eve", 25}}
table.sort(people, function(a, b) if a[2] ~= b[2] then return a[2] < b[2] end return a[1] > b[1] end)
local names = {}
for i, p in ipairs(people) do names[i] = p[1] .. p[2] end
print(table.concat(names, " "))
local strs = {"pear", "apple", "fig", "banana", "kiwi"}
table.sort(strs, function(a, b) return #a < #b or (#a == #b and a < b) end)
print(table.concat(strs, ","))

section("coroutines")
local gen = coroutine.wrap(function(n) for i = 1, n do coroutine.yield(i * 10) end return "done" end)
print(gen(3), gen(), gen(), gen())
local co = coroutine.create(function(a, b)
  local c = coroutine.yield(a + b)
  local d, e = coroutine.yield(c * 2)
  return d + e
end)
print(coroutine.resume(co, 1, 2)); print(coroutine.resume(co, 10)); print(coroutine.resume(co, 3, 4))
print(coroutine.status(co), coroutine.resume(co))
local function producer() return coroutine.create(function()
  for _, w in ipairs({"alpha", "beta", "gamma"}) do coroutine.yield(w) end end) end
local p = producer()
while true do
  local ok, w = coroutine.resume(p)
  if not w then break end
  io.write(w, ok and " " or "?")
end
print(coroutine.isyieldable(), select(2, coroutine.running()), type(coroutine.running()))
local bad = coroutine.create(function() error("inside") end)
print(coroutine.resume(bad))

section("pcall and error")
print(pcall(error, "boom"))
print(pcall(function() local x = nil; return x.field end))
local okc, errt = pcall(error, {code = 42})
print(okc, type(errt), errt.code)
print(tostring(select(2, pcall(error, setmetatable({}, {__tostring = function() return "custom" end})))))
print(xpcall(function() error("deep", 0) end, function(m) return "handled: " .. m end))
local function lvl(n) if n == 0 then error("at the bottom") end return lvl(n - 1) end
print(pcall(lvl, 50))
print(pcall(string.rep))
print(pcall(function() return 1 + {} end))
local ok, msg = pcall(function() local t2 = setmetatable({}, {__index = function() error("idx") end}); return t2.x end)
print(ok, msg)
print(select("#", pcall(error)))
local depth = 0
local function nest(n) if n == 0 then return "ok" end
  local ok2, r = pcall(nest, n - 1); depth = depth + 1; return r end
print(nest(30), depth)
print(pcall(error, "no position", 0), pcall(error, "level 2", 2))

section("goto")
for i = 1, 3 do
  for j = 1, 3 do
    if j == 2 then goto continue end
    io.write(i, ":", j, " ")
    ::continue::
  end
end
print()
do
  local n = 0
  ::top::
  n = n + 1
  if n < 5 then goto top end
  print("looped", n)
end

section("misc")
print(type(print), type(nil), type({}), type("s"), type(2), select(-1, "a", "b", "c"))
print(string.format("%s %s", load("return 1 + 2")(), load("syntax error here")))
local env = {x = 5}
print(load("return x * 2", "chunk", "t", env)())
print(next({}), rawequal("a", "a"), #arg, arg[0] ~= nil)
print(os.getenv("CAPSULE_NO_SUCH_VAR"), os.execute() == false or os.execute())

section("uncaught")
io.write("about to fail\n")
error("this error is not caught")
