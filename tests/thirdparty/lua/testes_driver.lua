-- Runs the files of Lua's testes/ named on the command line one after another in this interpreter, as its own
-- all.lua does, with a line before and after each: "BEGIN name", then "PASS name" or "FAIL name: message".
-- One interpreter (one kernel load) serves them all. Used by tests/thirdparty/test_lua_testes.py.
for _, name in ipairs(arg) do
  print("BEGIN " .. name)
  io.stdout:flush()
  local ok, err = pcall(dofile, name .. ".lua")
  io.stdout:flush()
  io.stderr:flush()
  if ok then
    print("PASS " .. name)
  else
    print("FAIL " .. name .. ": " .. tostring(err))
  end
  io.stdout:flush()
end
