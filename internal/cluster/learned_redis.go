package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/flow"
)

// redisLearned is mergeLearned in one script, on the key's hash
// PREFIX:{K}:learned (field "account/dim" → a JSON record whose instants
// are microseconds since the epoch, as strings: cjson would round them).
// KEYS: learned. ARGV: node, channel, key, then per report: field, limit,
// limit_at_us, remaining, reset_us, sent_us, at_us (an instant 0: not
// reported). A limit whose value changes is announced on the channel. It
// returns every field and record of the key.
var redisLearned = redis.NewScript(`
local node = ARGV[1]
local changed = false
for i = 4, #ARGV, 7 do
  local f = ARGV[i]
  local cur = {limit='0', limit_at='0', limit_node='', remaining='-1', reset='0', sent='0', at='0', remaining_node=''}
  local raw = redis.call('HGET', KEYS[1], f)
  if raw then cur = cjson.decode(raw) end
  local limAt, at = tonumber(ARGV[i+2]), tonumber(ARGV[i+6])
  if limAt > 0 and limAt > tonumber(cur.limit_at) then
    if tonumber(ARGV[i+1]) ~= tonumber(cur.limit) then changed = true end
    cur.limit, cur.limit_at, cur.limit_node = ARGV[i+1], ARGV[i+2], node
  end
  if at > 0 and at > tonumber(cur.at) then
    cur.remaining, cur.reset, cur.sent, cur.at, cur.remaining_node = ARGV[i+3], ARGV[i+4], ARGV[i+5], ARGV[i+6], node
  end
  redis.call('HSET', KEYS[1], f, cjson.encode(cur))
end
-- The reports outlive every lease; a key unused for a day is dropped.
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('PTTL', KEYS[1]) < 86400000 then
  redis.call('PEXPIRE', KEYS[1], 86400000)
end
if changed then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return redis.call('HGETALL', KEYS[1])
`)

// redisLearnedRecord is a record as the script stores it.
type redisLearnedRecord struct {
	Limit         string `json:"limit"`
	LimitAt       string `json:"limit_at"`
	LimitNode     string `json:"limit_node"`
	Remaining     string `json:"remaining"`
	Reset         string `json:"reset"`
	Sent          string `json:"sent"`
	At            string `json:"at"`
	RemainingNode string `json:"remaining_node"`
}

// pipeline runs the sync script (keys, args) and redisLearned for rep's
// reports in one round trip: the learned reports are their own atomic
// step (they have no invariant tied to the leases). A script the server
// does not have cached (NOSCRIPT, after a restart) is sent again whole.
func (r *Redis) pipeline(ctx context.Context, sync *redis.Script, keys []string, args []any, rep Report) (syncCmd, learnedCmd *redis.Cmd) {
	lkeys := []string{r.prefix + ":{" + rep.Key + "}:learned"}
	largs := []any{rep.Node, r.prefix, rep.Key}
	for _, l := range rep.Learned {
		limAt, at := usOf(l.LimitAt), usOf(l.At)
		if !l.HasLimit() {
			limAt = 0
		}
		if !l.HasRemaining() {
			at = 0
		}
		largs = append(largs, field(l), num(l.Limit), limAt, num(l.Remaining), usOf(l.Reset), usOf(l.SentAt), at)
	}
	pipe := r.client.Pipeline()
	syncCmd = sync.EvalSha(ctx, pipe, keys, args...)
	learnedCmd = redisLearned.EvalSha(ctx, pipe, lkeys, largs...)
	_, _ = pipe.Exec(ctx) // each command carries its own error
	if redis.HasErrorPrefix(syncCmd.Err(), "NOSCRIPT") {
		syncCmd = sync.Run(ctx, r.client, keys, args...)
	}
	if redis.HasErrorPrefix(learnedCmd.Err(), "NOSCRIPT") {
		learnedCmd = redisLearned.Run(ctx, r.client, lkeys, largs...)
	}
	return syncCmd, learnedCmd
}

// readRedisLearned decodes redisLearned's answer.
func readRedisLearned(cmd *redis.Cmd) ([]flow.ClusterReport, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return nil, err
	}
	return decodeRedisLearned(res)
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func decodeRedisLearned(res []string) ([]flow.ClusterReport, error) {
	if len(res)%2 != 0 {
		return nil, errRedisReply
	}
	out := make([]flow.ClusterReport, 0, len(res)/2)
	for i := 0; i < len(res); i += 2 {
		var l flow.ClusterReport
		var rec redisLearnedRecord
		acct, dim, ok := cutLast(res[i])
		d, derr := strconv.Atoi(dim)
		if !ok || derr != nil {
			return nil, errors.Join(errRedisReply, fmt.Errorf("field %q", res[i]))
		}
		if err := json.Unmarshal([]byte(res[i+1]), &rec); err != nil {
			return nil, errors.Join(errRedisReply, err)
		}
		l.Account, l.Dim, l.LimitNode, l.RemainingNode = acct, flow.Dim(d), rec.LimitNode, rec.RemainingNode
		var errs []error
		parse := func(s string) float64 {
			f, err := strconv.ParseFloat(s, 64)
			errs = append(errs, err)
			return f
		}
		l.Limit, l.Remaining = parse(rec.Limit), parse(rec.Remaining)
		l.LimitAt, l.Reset = timeOfUS(int64(parse(rec.LimitAt))), timeOfUS(int64(parse(rec.Reset)))
		l.SentAt, l.At = timeOfUS(int64(parse(rec.Sent))), timeOfUS(int64(parse(rec.At)))
		if err := errors.Join(errs...); err != nil {
			return nil, errors.Join(errRedisReply, err)
		}
		out = append(out, normalLearned(l))
	}
	sortLearned(out)
	return out, nil
}

// cutLast splits "account/dim" at its last slash.
func cutLast(s string) (before, after string, ok bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}
