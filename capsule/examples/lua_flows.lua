-- lua_flows.lua: a line per flow, and a sliding window of packet sizes.
--
--     capsule attach xdp --lua capsule/examples/lua_flows.lua --dev eth1 --mode generic
--
-- Parses Ethernet, IPv4 (with options) and IPv6, TCP and UDP ports, and prints a line when a flow (protocol,
-- addresses, ports) is seen for the first time, with the mean size of the last WINDOW packets of this CPU.
-- EVERY_PACKET = true prints a line for every packet instead (the printing case of `capsule bench hooks`).
-- Packets to DROP_PORT are dropped.

WINDOW = 16
EVERY_PACKET = false
DROP_PORT = 9999

local NAMES = {[6] = "tcp", [17] = "udp", [1] = "icmp", [58] = "icmp6"}

flows = {}
nflows = 0
local sizes, at, sum = {}, 0, 0

local function v4(pkt, off) return string.format("%d.%d.%d.%d", pkt:byte(off + 1, off + 4)) end

local function v6(pkt, off)
  local w = {}
  for k = 0, 7 do w[k + 1] = string.format("%x", pkt:u16(off + 2 * k)) end
  return table.concat(w, ":")
end

-- protocol number, source, destination, offset of the transport header; or nil
local function network(pkt)
  local ethertype = pkt:u16(12)
  if ethertype == 0x0800 and pkt:captured() >= 34 then
    local ihl = (pkt:u8(14) & 15) * 4
    if ihl < 20 then return nil end
    return pkt:u8(23), v4(pkt, 26), v4(pkt, 30), 14 + ihl
  elseif ethertype == 0x86dd and pkt:captured() >= 54 then
    return pkt:u8(20), v6(pkt, 22), v6(pkt, 38), 54
  end
  return nil
end

local function window(len)
  at = at % WINDOW + 1
  sum = sum - (sizes[at] or 0) + len
  sizes[at] = len
  return sum / math.min(#sizes, WINDOW)
end

function on_packet(pkt)
  local mean = window(pkt:len())
  local proto, src, dst, l4 = network(pkt)
  if not proto then return PASS end
  local sport, dport = 0, 0
  if proto == 6 or proto == 17 then
    sport, dport = pkt:u16(l4) or 0, pkt:u16(l4 + 2) or 0
  end
  local name = NAMES[proto] or tostring(proto)
  local key = string.format("%s %s:%d -> %s:%d", name, src, sport, dst, dport)
  local seen = flows[key]
  flows[key] = (seen or 0) + 1
  if not seen then nflows = nflows + 1 end
  if EVERY_PACKET or not seen then
    print(string.format("%s %s, %d bytes, mean %.1f", seen and "flow" or "new flow", key, pkt:len(), mean))
  end
  if dport == DROP_PORT then return DROP end
end
