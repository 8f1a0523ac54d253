package approvalstore

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Redis store's scripts, one per state change (plus get, which reads a
// record together with Redis TIME). Each touches exactly one key, named in
// KEYS, so each runs on one node of a Cluster; each applies all its checks
// before its single write; each is safe to repeat after a lost reply, since
// go-redis retries commands on network errors. The sources live in lua/ so
// that they read as Lua.
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/create.lua
	createLua string
	//go:embed lua/pending.lua
	pendingLua string
	//go:embed lua/get.lua
	getLua string
	//go:embed lua/decide.lua
	decideLua string
	//go:embed lua/consume.lua
	consumeLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/outcome.lua
	outcomeLua string

	createScript  = redis.NewScript(source(createLua))
	pendingScript = redis.NewScript(source(pendingLua))
	getScript     = redis.NewScript(source(getLua))
	decideScript  = redis.NewScript(source(decideLua))
	consumeScript = redis.NewScript(source(consumeLua))
	releaseScript = redis.NewScript(source(releaseLua))
	outcomeScript = redis.NewScript(source(outcomeLua))

	scripts = []*redis.Script{createScript, pendingScript, getScript, decideScript, consumeScript, releaseScript, outcomeScript}
)

// source returns a script's full source: the record accessors generated
// from recordFields, the prelude, and the script.
func source(script string) string {
	var b strings.Builder
	b.WriteString("local function record()\n  return redis.call('HMGET', KEYS[1]")
	for _, f := range recordFields {
		b.WriteString(", '" + f + "'")
	}
	b.WriteString(")\nend\n")
	for i, f := range recordFields {
		fmt.Fprintf(&b, "local f_%s = %d\n", f, i+1)
	}
	b.WriteString(preludeLua)
	b.WriteString(script)
	return b.String()
}

// reply is a script's answer: a status word first, then what it carries.
type reply []any

func (r reply) status() string { s, _ := r.at(0).(string); return s }

func (r reply) at(i int) any {
	if i < len(r) {
		return r[i]
	}
	return nil
}

// str returns element i as a string, or an error naming the script.
func (r reply) str(i int) (string, error) {
	s, ok := r.at(i).(string)
	if !ok {
		return "", fmt.Errorf("approvalstore: unexpected script reply %v", []any(r))
	}
	return s, nil
}

// values returns element i as the values of a record's fields, in the
// order of recordFields; fields not set are absent from the map.
func (r reply) values(i int) (map[string]string, error) {
	raw, ok := r.at(i).([]any)
	if !ok || len(raw) != len(recordFields) {
		return nil, fmt.Errorf("approvalstore: unexpected script reply %v", []any(r))
	}
	m := make(map[string]string, len(raw))
	for j, v := range raw {
		switch v := v.(type) {
		case string:
			m[recordFields[j]] = v
		case nil:
		default:
			return nil, fmt.Errorf("approvalstore: unexpected script reply %v", []any(r))
		}
	}
	return m, nil
}

// list returns element i as a list of strings.
func (r reply) list(i int) ([]string, error) {
	raw, ok := r.at(i).([]any)
	if !ok {
		return nil, fmt.Errorf("approvalstore: unexpected script reply %v", []any(r))
	}
	out := make([]string, len(raw))
	for j, v := range raw {
		if out[j], ok = v.(string); !ok {
			return nil, fmt.Errorf("approvalstore: unexpected script reply %v", []any(r))
		}
	}
	return out, nil
}
