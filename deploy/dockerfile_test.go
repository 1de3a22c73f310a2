package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined: its command (upper case), its leading --flags and the rest.
type dockerInstruction struct {
	Line  int
	Cmd   string
	Flags map[string]string
	Args  string
}

func (in dockerInstruction) String() string {
	return fmt.Sprintf("line %d: %s %s", in.Line, in.Cmd, in.Args)
}

// dockerStage is a FROM and the instructions up to the next one.
type dockerStage struct {
	From, Name string
	Instrs     []dockerInstruction
}

// parseDockerfile reads the instructions of a Dockerfile: comments and
// blank lines dropped, "\" continuations joined, the first word the
// command, leading --name=value words its flags. It knows no more of the
// syntax than the repository's Dockerfile uses (no heredocs, no escape
// directive).
func parseDockerfile(path string) ([]dockerStage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var stages []dockerStage
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		start := i + 1
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				next = ""
			}
			l = strings.TrimSuffix(l, "\\") + " " + next
		}
		cmd, rest, _ := strings.Cut(l, " ")
		in := dockerInstruction{Line: start, Cmd: strings.ToUpper(cmd), Flags: map[string]string{}}
		rest = strings.TrimSpace(rest)
		for strings.HasPrefix(rest, "--") {
			var word string
			word, rest, _ = strings.Cut(rest, " ")
			rest = strings.TrimSpace(rest)
			name, value, _ := strings.Cut(strings.TrimPrefix(word, "--"), "=")
			in.Flags[name] = value
		}
		in.Args = rest
		switch {
		case in.Cmd == "FROM":
			from, name, _ := strings.Cut(in.Args, " AS ")
			if !strings.Contains(in.Args, " AS ") {
				from, name, _ = strings.Cut(in.Args, " as ")
			}
			stages = append(stages, dockerStage{From: strings.TrimSpace(from), Name: strings.TrimSpace(name)})
		case len(stages) == 0:
			if in.Cmd != "ARG" {
				return nil, fmt.Errorf("%s: only ARG may come before the first FROM", in)
			}
		default:
			stages[len(stages)-1].Instrs = append(stages[len(stages)-1].Instrs, in)
		}
	}
	return stages, nil
}

// dockerCopy is a COPY of the final stage: a source in a build stage
// (From set) or in the build context, its destination, and the owner and
// mode it gets.
type dockerCopy struct {
	Instr     dockerInstruction
	From      string // the stage copied from; "" for the build context
	Src, Dest string
	UID, GID  int // --chown; 0 when absent
}

// imageFromStage turns the final stage into an image config (what
// `docker build` would write) and the list of its COPY layers. An
// instruction it does not know fails, so that a Dockerfile change the
// test cannot mirror is noticed rather than skipped.
func imageFromStage(st dockerStage) (v1.Config, []dockerCopy, error) {
	var cfg v1.Config
	var copies []dockerCopy
	for _, in := range st.Instrs {
		var err error
		switch in.Cmd {
		case "COPY":
			f := strings.Fields(in.Args)
			if len(f) != 2 {
				return cfg, nil, fmt.Errorf("%s: want COPY [--from=STAGE] [--chown=UID:GID] SRC DEST", in)
			}
			c := dockerCopy{Instr: in, From: in.Flags["from"], Src: f[0], Dest: f[1]}
			for name := range in.Flags {
				if name != "from" && name != "chown" {
					return cfg, nil, fmt.Errorf("%s: COPY --%s is not mirrored by the image test", in, name)
				}
			}
			if own, ok := in.Flags["chown"]; ok {
				if c.UID, c.GID, err = parseUser(own); err != nil {
					return cfg, nil, fmt.Errorf("%s: %w", in, err)
				}
			}
			copies = append(copies, c)
		case "ENV":
			for _, kv := range strings.Fields(in.Args) {
				if !strings.Contains(kv, "=") {
					return cfg, nil, fmt.Errorf("%s: write ENV NAME=VALUE", in)
				}
				cfg.Env = append(cfg.Env, kv)
			}
		case "USER":
			cfg.User = in.Args
		case "WORKDIR":
			cfg.WorkingDir = in.Args
		case "VOLUME":
			var vols []string
			if err := json.Unmarshal([]byte(in.Args), &vols); err != nil {
				vols = strings.Fields(in.Args)
			}
			cfg.Volumes = map[string]struct{}{}
			for _, v := range vols {
				cfg.Volumes[v] = struct{}{}
			}
		case "EXPOSE":
			cfg.ExposedPorts = map[string]struct{}{}
			for _, p := range strings.Fields(in.Args) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				cfg.ExposedPorts[p] = struct{}{}
			}
		case "HEALTHCHECK":
			cfg.Healthcheck, err = parseHealthcheck(in)
		case "STOPSIGNAL":
			cfg.StopSignal = in.Args
		case "ENTRYPOINT":
			err = json.Unmarshal([]byte(in.Args), &cfg.Entrypoint)
		case "CMD":
			err = json.Unmarshal([]byte(in.Args), &cfg.Cmd)
		default:
			return cfg, nil, fmt.Errorf("%s: the image test does not mirror %s in the final stage", in, in.Cmd)
		}
		if err != nil {
			return cfg, nil, fmt.Errorf("%s: %w", in, err)
		}
	}
	return cfg, copies, nil
}

// parseHealthcheck reads HEALTHCHECK [--interval=…] [--timeout=…]
// [--start-period=…] [--retries=N] CMD ["exec", "form"].
func parseHealthcheck(in dockerInstruction) (*v1.HealthConfig, error) {
	hc := &v1.HealthConfig{}
	for name, v := range in.Flags {
		var err error
		switch name {
		case "interval":
			hc.Interval, err = time.ParseDuration(v)
		case "timeout":
			hc.Timeout, err = time.ParseDuration(v)
		case "start-period":
			hc.StartPeriod, err = time.ParseDuration(v)
		case "retries":
			hc.Retries, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown flag --%s", name)
		}
		if err != nil {
			return nil, err
		}
	}
	form, ok := strings.CutPrefix(in.Args, "CMD ")
	if !ok {
		return nil, fmt.Errorf("want HEALTHCHECK … CMD [\"exec\", \"form\"]")
	}
	var argv []string
	if err := json.Unmarshal([]byte(strings.TrimSpace(form)), &argv); err != nil {
		return nil, fmt.Errorf("the health check's CMD must be an exec-form JSON array (a scratch image has no shell): %w", err)
	}
	hc.Test = append([]string{"CMD"}, argv...)
	return hc, nil
}

// parseUser reads "UID:GID" (numeric: a scratch image has no /etc/passwd).
func parseUser(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("user %q: want numeric UID:GID", s)
	}
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("user %q: want numeric UID:GID", s)
	}
	if gid, err = strconv.Atoi(g); err != nil {
		return 0, 0, fmt.Errorf("user %q: want numeric UID:GID", s)
	}
	return uid, gid, nil
}
