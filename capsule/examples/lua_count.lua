-- lua_count.lua: a header parser that counts, and prints nothing per packet.
--
--     capsule attach xdp --lua capsule/examples/lua_count.lua --dev eth1 --mode generic
--
-- Counts packets by protocol (Ethernet, IPv4/IPv6, the transport) and by source address (the top talkers),
-- in ordinary Lua tables that live across packets (each CPU has a VM of its own, so each CPU counts its own
-- packets). Every REPORT_EVERY packets it prints one summary line; 0 never does, which is the parse-only
-- case of `capsule bench hooks`.

REPORT_EVERY = 10000
TOP = 3

local PROTOCOLS = {[1] = "icmp", [6] = "tcp", [17] = "udp", [58] = "icmp6"}

total = 0
by_protocol = {}
talkers = {}

local function ipv4(pkt, at)
  return string.format("%d.%d.%d.%d", pkt:byte(at + 1, at + 4))
end

local function ipv6(pkt, at)
  local words = {}
  for k = 0, 7 do
    words[#words + 1] = string.format("%x", pkt:u16(at + 2 * k))
  end
  return table.concat(words, ":")
end

-- (protocol name, source address or nil) of a frame
local function classify(pkt)
  local ethertype = pkt:u16(12)
  if ethertype == 0x0800 and pkt:captured() >= 34 then
    return PROTOCOLS[pkt:u8(23)] or "ipv4", ipv4(pkt, 26)
  elseif ethertype == 0x86dd and pkt:captured() >= 54 then
    return PROTOCOLS[pkt:u8(20)] or "ipv6", ipv6(pkt, 22)
  elseif ethertype == 0x0806 then
    return "arp", nil
  end
  return "other", nil
end

function report()
  local names = {}
  for name in pairs(by_protocol) do names[#names + 1] = name end
  table.sort(names)
  local parts = {}
  for _, name in ipairs(names) do parts[#parts + 1] = name .. "=" .. by_protocol[name] end
  local top = {}
  for addr, n in pairs(talkers) do top[#top + 1] = {addr, n} end
  table.sort(top, function(a, b) return a[2] > b[2] or (a[2] == b[2] and a[1] < b[1]) end)
  local best = {}
  for k = 1, math.min(TOP, #top) do best[k] = top[k][1] .. " " .. top[k][2] end
  print(string.format("%d packets: %s; top: %s", total, table.concat(parts, " "), table.concat(best, ", ")))
end

function on_packet(pkt)
  total = total + 1
  local protocol, src = classify(pkt)
  by_protocol[protocol] = (by_protocol[protocol] or 0) + 1
  if src then talkers[src] = (talkers[src] or 0) + 1 end
  if REPORT_EVERY > 0 and total % REPORT_EVERY == 0 then report() end
end
