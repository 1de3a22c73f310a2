package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Backend on a Redis server (cluster.store: redis://…). Each
// Sync, Leave and Lead is one Lua script (Sync sends a second in the same
// round trip, merging the shared provider reports, learned_redis.go: they
// have no invariant tied to the leases), so every step is atomic on the
// server: the expiry, the renewal, the allocation (Allocate, written again
// in Lua) and the write-back happen together, with no read here and write
// there. Expiry is measured on the server's clock (TIME), so the nodes'
// clocks need not agree.
//
// Per key K the state is two hashes sharing the hash tag {K} (so one
// script touches one slot): PREFIX:{K}:leases (node → "share demand slots
// slot_demand expires_us incarnation") and PREFIX:{K}:signals (paused_until,
// open_until, probe_node, probe_expires, in microseconds since the epoch);
// the leadership is PREFIX:leader:{name} ("incarnation node"). PREFIX is RedisPrefixDefault
// unless the URL says key_prefix. A published pause or breaker opening is
// announced on the channel PREFIX (Listen).
type Redis struct {
	client *redis.Client
	prefix string
}

// RedisPrefixDefault is the prefix of every key and of the pub/sub channel
// (a published pause or breaker opening is announced on the channel
// named the prefix, the payload being the key). The store URL's
// key_prefix parameter overrides it, so clusters can share a server.
const RedisPrefixDefault = "sluice:cluster"

// redisLog routes the Redis client library's own messages (reconnections,
// pool errors), which it writes as plain text to stderr by default, to a
// structured logger.
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.WarnContext(ctx, "redis client", "message", strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// SetRedisLogger sends the Redis client library's messages to l (at warn,
// msg "redis client"), so a JSON log stays JSON. The library's logger is
// global to the process: the last call wins.
func SetRedisLogger(l *slog.Logger) {
	if l != nil {
		redis.SetLogger(redisLog{log: l})
	}
}

// OpenRedis connects to url (redis://[user:password@]host:port/db, with
// an optional key_prefix=… parameter) and checks the server answers.
func OpenRedis(ctx context.Context, url string) (*Redis, error) {
	prefix := RedisPrefixDefault
	if u, err := neturl.Parse(url); err == nil {
		q := u.Query()
		if p := q.Get("key_prefix"); p != "" {
			prefix = p
		}
		q.Del("key_prefix")
		u.RawQuery = q.Encode()
		url = u.String()
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("cluster store: %w", err)
	}
	opt.PoolSize = 4
	opt.DisableIdentity = true // no CLIENT SETINFO: older servers reject it
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("cluster store: %w", err), c.Close())
	}
	return &Redis{client: c, prefix: prefix}, nil
}

// Close implements Backend.
func (r *Redis) Close() error { return r.client.Close() }

func (r *Redis) keys(key string) []string {
	return []string{r.prefix + ":{" + key + "}:leases", r.prefix + ":{" + key + "}:signals"}
}

// redisSync is Sync in one script. KEYS: leases, signals. ARGV: node,
// share, demand, slots, slot_demand, max_slots, ttl_us, paused_until_us,
// open_until_us, want_probe, closed, channel, key, starting, backlog,
// level, burst_seconds, returned, renew, incarnation, from, from_aside
// (times 0: none; from "": none).
// A lease is "share demand slots slot_demand expires_us incarnation" (no
// incarnation: written by a version without them).
//
// The allocation is Allocate's and the burst pool burstPool.step's, line
// for line. Another incarnation's unexpired lease under node is set aside
// (asideNode) unless renew, when the script writes nothing and answers
// {'duplicate', its incarnation}.
var redisSync = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local node = ARGV[1]
local share, demand = tonumber(ARGV[2]), tonumber(ARGV[3])
local slots, slotDemand = tonumber(ARGV[4]), tonumber(ARGV[5])
local maxSlots, ttl = tonumber(ARGV[6]), tonumber(ARGV[7])
local paused, openUntil = tonumber(ARGV[8]), tonumber(ARGV[9])
local wantProbe, closed = ARGV[10] == '1', ARGV[11] == '1'
local starting, backlog, level = ARGV[14] == '1', tonumber(ARGV[15]), tonumber(ARGV[16])
local burstSecs, returned = tonumber(ARGV[17]), tonumber(ARGV[18])
local renew, inc = ARGV[19] == '1', ARGV[20]
local from, fromAside = ARGV[21], ARGV[22]
local function num(x) return string.format('%.17g', x) end
local function enc(l) return num(l.share)..' '..num(l.demand)..' '..num(l.slots)..' '..num(l.slotDemand)..' '..num(l.exp)..' '..l.inc end
local function dec(v)
  local f = {}
  for w in string.gmatch(v, '%S+') do f[#f+1] = w end
  return {share=tonumber(f[1]), demand=tonumber(f[2]), slots=tonumber(f[3]), slotDemand=tonumber(f[4]), exp=tonumber(f[5]), inc=f[6] or ''}
end

-- Another incarnation's unexpired lease under our node: a duplicate process
-- (renew), or taken over and kept aside until it expires.
local cur = redis.call('HGET', KEYS[1], node)
if cur then
  local c = dec(cur)
  if c.exp >= now and c.inc ~= inc then
    if renew then return {'duplicate', c.inc} end
    redis.call('HSET', KEYS[1], node .. '~' .. c.inc, cur)
    redis.call('HDEL', KEYS[1], node)
  end
end

-- Drop expired leases; renew ours. For the burst pool: the shares held
-- by the unexpired leases before the renewal, and since when ours was. Our
-- own leases kept aside or under our former id were held until now, so
-- they are counted; they go, as this report holds what we apply now.
local leases = {}
local held, unexpired, selfSince = 0, 0, -1
local ownAside = node .. '~' .. inc
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f = dec(all[i+1])
  if f.exp >= now then
    held, unexpired = held + f.share, unexpired + 1
  end
  if all[i] == ownAside or (from ~= '' and (all[i] == from or all[i] == fromAside) and f.inc == inc) then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= node then
    if f.exp < now then
      redis.call('HDEL', KEYS[1], all[i])
    else
      f.node = all[i]
      leases[#leases+1] = f
    end
  elseif f.exp >= now then
    selfSince = now - (f.exp - ttl)
  end
end
local me = {node=node, share=share, demand=demand, slots=slots, slotDemand=slotDemand, exp=now+ttl, inc=inc}
leases[#leases+1] = me

-- Allocate.
local n = #leases
local sumDemand, sumSlotDemand, othersShare, othersSlots = 0, 0, 0, 0
for _, l in ipairs(leases) do
  sumDemand = sumDemand + l.demand
  sumSlotDemand = sumSlotDemand + l.slotDemand
  if l.node ~= node then
    othersShare = othersShare + l.share
    othersSlots = othersSlots + l.slots
  end
end
local fl = math.min(0.05, 1 / (2 * n))
local function targetOf(d)
  if sumDemand > 0 then return fl + (1 - fl * n) * d / sumDemand end
  return 1 / n
end
local target = targetOf(demand)
local short = -(1 - othersShare - share)
local claimed = math.max(share, target)
for _, l in ipairs(leases) do
  if l.node ~= node then
    short = short + math.max(0, targetOf(l.demand) - l.share)
    claimed = claimed + math.max(l.share, targetOf(l.demand))
  end
end
if demand > 0 and claimed < 1 then target = target + (1 - claimed) end
if target < share and target > share * (1 - 0.1) and short <= 1e-9 then
  target = share
end
local gShare = math.max(0, math.min(target, 1 - othersShare))
local gSlots = 0
if maxSlots > 0 then
  local want = math.floor(maxSlots / n)
  if sumSlotDemand > 0 and maxSlots >= n then
    want = 1 + math.floor((maxSlots - n) * slotDemand / sumSlotDemand)
  elseif sumSlotDemand > 0 then
    want = math.floor(maxSlots * slotDemand / sumSlotDemand)
  end
  if slotDemand > 0 or sumSlotDemand == 0 then
    want = math.max(want, 1)
  end
  gSlots = math.max(0, math.min(want, maxSlots - othersSlots))
end
me.share = math.max(gShare, share)
me.slots = math.max(gSlots, slots)
redis.call('HSET', KEYS[1], node, enc(me))
-- The hash outlives its longest lease; never shorten it.
if redis.call('PTTL', KEYS[1]) < (ttl / 1000) * 2 then
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) * 2)
end

-- Signals: the pause (latest wins), the breaker and its probe token.
local announce = false
local sig = redis.call('HMGET', KEYS[2], 'paused_until', 'open_until', 'probe_node', 'probe_expires', 'pool', 'pool_at')
local curPaused, curOpen = tonumber(sig[1]) or 0, tonumber(sig[2]) or 0
local probeNode, probeExp = sig[3] or '', tonumber(sig[4]) or 0
if paused > 0 then
  announce = true
  if paused > curPaused then curPaused = paused end
end
if openUntil > 0 then
  announce = true
  if openUntil > curOpen then curOpen = openUntil end
  probeNode, probeExp = '', 0
end
if closed and curOpen > 0 and probeNode == node and probeExp >= now then
  curOpen, probeNode, probeExp = 0, '', 0
  announce = true
end
if probeNode == node and not wantProbe then probeNode, probeExp = '', 0 end
if probeExp < now then probeNode, probeExp = '', 0 end
if curOpen > 0 and curOpen <= now and wantProbe and (probeNode == '' or probeNode == node) then
  probeNode, probeExp = node, now + ttl
end
-- The burst pool: decay, a fresh start, what ours dropped, our credit.
local pool, poolAt = tonumber(sig[5]) or 0, tonumber(sig[6]) or 0
local was = pool
if poolAt > 0 and now > poolAt then
  if burstSecs > 0 then
    pool = pool - ((now - poolAt) / 1000000) / burstSecs * held
  else
    pool = 0
  end
end
pool = math.max(pool, 0)
if unexpired == 0 and starting then pool = 1 end
if returned > 0 and selfSince >= 0 and burstSecs > 0 then
  pool = pool + math.max(0, returned - (selfSince / 1000000) / burstSecs)
end
pool = math.min(pool, 1)
local credit = math.max(0, math.min(math.min(pool, backlog), gShare - level))
pool = pool - credit
if pool > 0 or was > 0 then poolAt = now end
redis.call('HSET', KEYS[2], 'paused_until', num(curPaused), 'open_until', num(curOpen), 'probe_node', probeNode, 'probe_expires', num(probeExp),
  'pool', num(pool), 'pool_at', num(poolAt))
if redis.call('PTTL', KEYS[2]) < 86400000 then redis.call('PEXPIRE', KEYS[2], 86400000) end
if announce then redis.call('PUBLISH', ARGV[12], ARGV[13]) end

local out = {num(gShare), gSlots, num(curPaused), num(curOpen), (probeNode == node) and 1 or 0, num(credit), num(pool)}
for _, l in ipairs(leases) do
  out[#out+1] = l.node
  out[#out+1] = enc(l)
end
return out
`)

func usOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func timeOfUS(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Sync implements Backend.
func (r *Redis) Sync(ctx context.Context, rep Report) (Grant, error) {
	if err := rep.validate(); err != nil {
		return Grant{}, err
	}
	former := ownFormer(rep)
	keys, args := r.keys(rep.Key), []any{
		rep.Node, rep.Share, rep.Demand, rep.Slots, rep.SlotDemand, rep.MaxSlots, max(rep.TTL.Microseconds(), 1),
		usOf(rep.PausedUntil), usOf(rep.BreakerOpenUntil), flag(rep.WantProbe), flag(rep.BreakerClosed),
		r.prefix, rep.Key, flag(rep.Starting), rep.Backlog, rep.Level, rep.BurstSeconds, rep.Returned,
		flag(rep.Renew), rep.Incarnation, former[1], former[2]}
	// Both scripts in one round trip (learned_redis.go).
	syncCmd, learnedCmd := r.pipeline(ctx, redisSync, keys, args, rep)
	res, err := syncCmd.Slice()
	if err != nil {
		return Grant{}, fmt.Errorf("cluster sync %s: %w", rep.Key, err)
	}
	if len(res) == 2 && res[0] == "duplicate" {
		inc, _ := res[1].(string)
		return Grant{}, fmt.Errorf("cluster sync %s: %w", rep.Key, &DuplicateError{Key: rep.Key, Node: rep.Node, Incarnation: inc})
	}
	g, err := decodeRedisGrant(res)
	if err != nil {
		return Grant{}, fmt.Errorf("cluster sync %s: %w", rep.Key, err)
	}
	if g.Learned, err = readRedisLearned(learnedCmd); err != nil {
		return Grant{}, fmt.Errorf("cluster sync %s: shared reports: %w", rep.Key, err)
	}
	sortLeases(g.Leases)
	return g, nil
}

var errRedisReply = errors.New("unexpected reply from the sync script")

func decodeRedisGrant(res []any) (Grant, error) {
	if len(res) < 7 || (len(res)-7)%2 != 0 {
		return Grant{}, errRedisReply
	}
	str := func(v any) string { s, _ := v.(string); return s }
	i64 := func(v any) int64 { n, _ := v.(int64); return n }
	var g Grant
	var err error
	if g.Share, err = strconv.ParseFloat(str(res[0]), 64); err != nil {
		return Grant{}, errors.Join(errRedisReply, err)
	}
	g.Slots = int(i64(res[1]))
	paused, err1 := strconv.ParseFloat(str(res[2]), 64)
	open, err2 := strconv.ParseFloat(str(res[3]), 64)
	if err := errors.Join(err1, err2); err != nil {
		return Grant{}, errors.Join(errRedisReply, err)
	}
	g.PausedUntil, g.BreakerOpenUntil = timeOfUS(int64(paused)), timeOfUS(int64(open))
	g.Probe = i64(res[4]) == 1
	credit, err1 := strconv.ParseFloat(str(res[5]), 64)
	pool, err2 := strconv.ParseFloat(str(res[6]), 64)
	if err := errors.Join(err1, err2); err != nil {
		return Grant{}, errors.Join(errRedisReply, err)
	}
	g.Credit, g.Pool = credit, pool
	for i := 7; i < len(res); i += 2 {
		fields := strings.Fields(str(res[i+1]))
		if len(fields) < 5 {
			return Grant{}, fmt.Errorf("%w: lease %q", errRedisReply, str(res[i+1]))
		}
		var f [5]float64
		for j := range f {
			if f[j], err = strconv.ParseFloat(fields[j], 64); err != nil {
				return Grant{}, errors.Join(errRedisReply, err)
			}
		}
		l := Lease{Node: str(res[i]), Share: f[0], Demand: f[1], Slots: int(f[2]), SlotDemand: f[3], ExpiresAt: timeOfUS(int64(f[4]))}
		if len(fields) > 5 {
			l.Incarnation = fields[5]
		}
		g.Leases = append(g.Leases, l)
	}
	return g, nil
}

// redisLeave drops node's lease and the one kept aside from it when
// incarnation wrote them. KEYS: leases. ARGV: node, aside, incarnation.
var redisLeave = redis.NewScript(`
for _, f in ipairs({ARGV[1], ARGV[2]}) do
  local v = redis.call('HGET', KEYS[1], f)
  if v then
    local w = {}
    for x in string.gmatch(v, '%S+') do w[#w+1] = x end
    if (w[6] or '') == ARGV[3] then redis.call('HDEL', KEYS[1], f) end
  end
end
return 0
`)

// Leave implements Backend.
func (r *Redis) Leave(ctx context.Context, key, node, incarnation string) error {
	if err := redisLeave.Run(ctx, r.client, r.keys(key)[:1], node, asideNode(node, incarnation), incarnation).Err(); err != nil {
		return fmt.Errorf("cluster leave %s: %w", key, err)
	}
	return nil
}

// redisLead takes the leadership when it is free (expired keys vanish) or
// renews it for its holder's incarnation. KEYS: leadership. ARGV:
// incarnation, node, ttl_ms. The value is "incarnation node".
var redisLead = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur or string.match(cur, '^%S+') == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`)

// Lead implements Backend.
func (r *Redis) Lead(ctx context.Context, name, node, incarnation string, ttl time.Duration) (bool, error) {
	n, err := redisLead.Run(ctx, r.client, []string{r.prefix + ":leader:{" + name + "}"}, incarnation, node, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return false, fmt.Errorf("cluster lead %s: %w", name, err)
	}
	return n == 1, nil
}

// Listen implements Listener: it subscribes to the cluster's channel and
// calls changed with the key of every pause or breaker opening another
// node publishes, until ctx ends. The client resubscribes after a lost
// connection; a message published meanwhile is lost, and the periodic
// sync applies the signal within its interval.
func (r *Redis) Listen(ctx context.Context, changed func(key string)) {
	ps := r.client.Subscribe(ctx, r.prefix)
	defer func() { _ = ps.Close() }()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			changed(m.Payload)
		}
	}
}
