package hooks

import (
	"context"
	"fmt"
	"mime"
	"os"
	"path/filepath"

	"gateway/channels"
)

// hookHandler turns one event into a call of a hook program or URL: it encodes the event,
// hands it over and decodes the answer. It is the Handler a hook directory registers.
type hookHandler struct {
	name     string
	dir      string
	observer bool // registered for "*": the answer to a bus event is not read
	invoke   func(ctx context.Context, event string, body []byte) ([]byte, error)
}

func (h *hookHandler) handle(ctx context.Context, ev Event) (any, error) {
	ev, temps, err := materialise(ev)
	defer removeTemps(temps)
	if err != nil {
		return nil, fmt.Errorf("hook %q: %w", h.name, err)
	}
	body, err := Encode(ev)
	if err != nil {
		return nil, fmt.Errorf("hook %q: %w", h.name, err)
	}
	out, err := h.invoke(ctx, ev.EventName(), body)
	// A "*" hook only watches the bus, but its own commands and tools still answer.
	if err != nil || (h.observer && !declaredEvent(ev)) {
		return nil, err
	}
	res, err := decodeFor(ev, out)
	if err != nil {
		// The error quotes the output, which may be a debug dump: the log's, not the model's.
		return nil, &Failure{"its answer is not a valid " + ev.EventName() + " result", fmt.Errorf("hook %q: %w", h.name, err)}
	}
	switch r := res.(type) {
	case *ReceiveResult:
		h.fixParts(r.Parts, temps)
	case *SendResult:
		h.fixParts(r.Parts, temps)
	}
	return res, nil
}

// declaredEvent tells the events only the hook that declared them gets (command, tool).
func declaredEvent(ev Event) bool {
	switch ev.(type) {
	case *Command, *Tool:
		return true
	}
	return false
}

// decodeFor decodes a program's answer to ev. For before_provider_request the answer is
// decoded over the options the program was given, so it may send only what it changes.
func decodeFor(ev Event, out []byte) (any, error) {
	if r, ok := ev.(*BeforeProviderRequest); ok {
		opts := r.Options
		if opts.Temperature != nil { // decoding writes through the pointer: do not share it
			t := *opts.Temperature
			opts.Temperature = &t
		}
		return decodeInto(ev.EventName(), &ProviderRequestResult{Options: opts}, out)
	}
	return DecodeResult(ev.EventName(), out)
}

// fixParts turns the temporary files of in-memory parts back into those parts (the files
// are removed after the call) and resolves relative paths against the hook folder.
func (h *hookHandler) fixParts(parts []channels.Part, temps map[string]channels.Part) {
	for i := range parts {
		p := &parts[i]
		if p.Path == "" {
			continue
		}
		if orig, ok := temps[p.Path]; ok {
			p.Data, p.Path = orig.Data, ""
			continue
		}
		if !filepath.IsAbs(p.Path) {
			p.Path = filepath.Join(h.dir, p.Path)
		}
	}
}

// materialise gives a program every media part of a message:receive as a file: parts
// that carry only Data are written to temporary files, returned by path with the part they
// stand for. ev itself is not changed.
func materialise(ev Event) (Event, map[string]channels.Part, error) {
	mr, ok := ev.(*MessageReceive)
	if !ok {
		return ev, nil, nil
	}
	need := false
	for _, p := range mr.Parts {
		need = need || (p.Path == "" && len(p.Data) > 0)
	}
	if !need {
		return ev, nil, nil
	}
	c := *mr
	c.Parts = append([]channels.Part(nil), mr.Parts...)
	temps := map[string]channels.Part{}
	for i, p := range c.Parts {
		if p.Path != "" || len(p.Data) == 0 {
			continue
		}
		path, err := writeTemp(p)
		if err != nil {
			return ev, temps, fmt.Errorf("write part %d to a file: %w", i, err)
		}
		temps[path] = p
		c.Parts[i].Path, c.Parts[i].Data = path, nil
		if c.Parts[i].Size == 0 {
			c.Parts[i].Size = int64(len(p.Data))
		}
	}
	return &c, temps, nil
}

func writeTemp(p channels.Part) (string, error) {
	ext := filepath.Ext(p.Name)
	if ext == "" && p.MIME != "" {
		if exts, _ := mime.ExtensionsByType(p.MIME); len(exts) > 0 {
			ext = exts[0]
		}
	}
	f, err := os.CreateTemp("", "gateway-hook-*"+ext) // mode 0600
	if err != nil {
		return "", err
	}
	_, werr := f.Write(p.Data)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("%s: %w", f.Name(), firstErr(werr, cerr))
	}
	return f.Name(), nil
}

func removeTemps(temps map[string]channels.Part) {
	for path := range temps {
		os.Remove(path)
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
