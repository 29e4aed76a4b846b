// Package config is the one decoder of the gateway's YAML files: gateway.yaml, profile.yaml
// and HOOK.yaml. Every file gets the same rules:
//
//   - strict: a key the target struct does not have is an error (so is a key given twice);
//   - "${VAR}" in a value expands from the environment; VAR unset (or empty) is an error
//     naming the file, line and key (the caller may excuse it, see Error.Var); nothing else
//     expands ("$VAR" and "$$" are literal);
//   - durations are Go durations ("90s", "30m", "2h", "0"), parsed the same way everywhere;
//   - every error carries the file, the line (from the yaml.v3 node) and the key path, e.g.
//     `profiles/support/profile.yaml:3: llm.modle: unknown key (known: provider, model, ...)`.
//
// Struct fields are matched by their `yaml` tag, else their `mapstructure` tag (the config
// structs of the gateway's packages use those), else their lower-cased name; `,squash` and
// `,inline` embed a struct's keys in its parent. Decoding writes into the value it is given,
// so a struct that already holds the defaults keeps them for every key the file leaves out.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a config file.
type Error struct {
	File string // the file, or where a value came from when not a file ("GATEWAY_LLM_MODEL")
	Line int    // 1-based; 0 when unknown
	Key  string // the key path: "channels.telegram.allow_from[0]"; "" for the whole file
	Msg  string
	Var  string // set when the problem is an unset ${Var}
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found, in file order.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Err returns es as an error, or nil when empty.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Options say where a document came from and how to expand it.
type Options struct {
	File string
	// Getenv looks up ${VAR}; nil means os.Getenv.
	Getenv func(string) string
	// Origin names the source of nodes that are not from File (environment overrides
	// grafted into the document), shown instead of File:line.
	Origin map[*yaml.Node]string
	// Moved lists keys that were renamed or moved (old path → new path): giving the old one
	// is an error that says where it went.
	Moved map[string]string
	// Hints are appended to a type error at a key, to show the form that is wanted
	// (e.g. `write it as a list: command: ["./run.sh"]`).
	Hints map[string]string
}

// Parse reads a YAML document. An empty document (or only comments) returns a nil node.
// A document that is not YAML is an error at the line where it stops being YAML, saying
// so in words, with the usual cause of the YAML library's message where one is known.
func Parse(file string, data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := cleanYAMLError(err.Error())
		line := errorLine(data, msg, yamlErrorLine(err))
		return nil, &Error{File: file, Line: line, Msg: "not valid YAML: " + msg + syntaxHint(msg, lineOf(data, line))}
	}
	n := &doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, nil
		}
		n = n.Content[0]
	}
	if n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil, nil
	}
	return n, nil
}

// DecodeBytes is Parse then Decode. An empty file decodes to nothing (out is unchanged).
func DecodeBytes(data []byte, out any, opts Options) (*yaml.Node, Errors) {
	root, err := Parse(opts.File, data)
	if err != nil {
		var e *Error
		errors.As(err, &e)
		return nil, Errors{e}
	}
	if root == nil {
		return nil, nil
	}
	return root, Decode(root, out, opts)
}

// Decode decodes the mapping root into out, a pointer to a struct, and reports every problem.
// Keys that decode are set even when others fail, so the caller can validate what it has.
func Decode(root *yaml.Node, out any, opts Options) Errors {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("config.Decode: out must be a non-nil pointer")
	}
	d := &decoder{opts: opts}
	if root != nil && root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	if root == nil || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		d.fail(root, "", "expected a mapping of keys, got %s", describe(root))
		return d.errs
	}
	d.decode(root, rv.Elem(), "")
	return d.errs
}

type decoder struct {
	opts Options
	errs Errors
}

func (d *decoder) fail(n *yaml.Node, key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if h, ok := d.opts.Hints[key]; ok {
		msg += " (" + h + ")"
	}
	d.errs = append(d.errs, d.at(n, key, msg))
}

func (d *decoder) at(n *yaml.Node, key, msg string) *Error {
	if origin, ok := d.opts.Origin[n]; ok {
		return &Error{File: origin, Key: key, Msg: msg}
	}
	return &Error{File: d.opts.File, Line: n.Line, Key: key, Msg: msg}
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	envRef       = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

func (d *decoder) decode(n *yaml.Node, v reflect.Value, key string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	if v.Type() == durationType {
		s, ok := d.scalar(n, key, "a duration")
		if !ok {
			return
		}
		dur, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			d.fail(n, key, "%q is not a duration (write e.g. 90s, 30m or 2h)", s)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Interface:
		// A free-form value (a tool's JSON Schema): taken as YAML gives it.
		var x any
		if err := n.Decode(&x); err != nil {
			d.fail(n, key, "%v", err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
		return
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), key)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.fail(n, key, "expected a mapping, got %s", describe(n))
			return
		}
		fields := map[string]reflect.Value{}
		var names []string
		structFields(v, fields, &names)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			k := kn.Value
			path := join(key, k)
			if seen[k] {
				d.fail(kn, path, "given twice")
				continue
			}
			seen[k] = true
			if to, ok := d.opts.Moved[path]; ok {
				d.fail(kn, path, "this key moved: write it as %s", to)
				continue
			}
			f, ok := fields[k]
			if !ok {
				d.fail(kn, path, "unknown key (known: %s)", strings.Join(names, ", "))
				continue
			}
			d.decode(vn, f, path)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(n, key, "expected a mapping, got %s", describe(n))
			return
		}
		if v.Type().Key().Kind() != reflect.String {
			d.fail(n, key, "unsupported map key type %s", v.Type().Key())
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(vn, elem, join(key, kn.Value))
			v.SetMapIndex(reflect.ValueOf(kn.Value).Convert(v.Type().Key()), elem)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, key, "expected a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", key, i))
		}
		v.Set(s)
	case reflect.String:
		if s, ok := d.scalar(n, key, "text"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		s, ok := d.scalar(n, key, "true or false")
		if !ok {
			return
		}
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			d.fail(n, key, "expected true or false, got %q", s)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s, ok := d.scalar(n, key, "a whole number")
		if !ok {
			return
		}
		i, err := strconv.ParseInt(strings.TrimSpace(s), 10, v.Type().Bits())
		if err != nil {
			d.fail(n, key, "expected a whole number, got %q", s)
			return
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		s, ok := d.scalar(n, key, "a whole number")
		if !ok {
			return
		}
		i, err := strconv.ParseUint(strings.TrimSpace(s), 10, v.Type().Bits())
		if err != nil {
			d.fail(n, key, "expected a whole number of at least 0, got %q", s)
			return
		}
		v.SetUint(i)
	case reflect.Float32, reflect.Float64:
		s, ok := d.scalar(n, key, "a number")
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), v.Type().Bits())
		if err != nil {
			d.fail(n, key, "expected a number, got %q", s)
			return
		}
		v.SetFloat(f)
	default:
		d.fail(n, key, "cannot decode into %s", v.Type())
	}
}

// scalar returns a scalar's text with ${VAR} expanded; want describes what was expected
// for the error when n is a list or a mapping.
func (d *decoder) scalar(n *yaml.Node, key, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, key, "expected %s, got %s", want, describe(n))
		return "", false
	}
	ok := true
	s := envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
		name := ref[2 : len(ref)-1]
		val := d.opts.Getenv(name)
		if val == "" {
			e := d.at(n, key, fmt.Sprintf("environment variable %s is not set", name))
			e.Var = name
			d.errs = append(d.errs, e)
			ok = false
		}
		return val
	})
	if !ok {
		// A value with an unset variable is left as it was: the decoder reports it, the
		// caller decides whether the part that uses it runs.
		return s, false
	}
	return s, true
}

// structFields lists the keys of a struct value, following squashed/inline embeds.
func structFields(v reflect.Value, out map[string]reflect.Value, names *[]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, inline := FieldKey(f)
		if name == "-" {
			continue
		}
		if inline && f.Type.Kind() == reflect.Struct {
			structFields(v.Field(i), out, names)
			continue
		}
		out[name] = v.Field(i)
		*names = append(*names, name)
	}
}

// FieldKey is the key a struct field has in a config file, and whether its fields are
// embedded in the parent's keys.
func FieldKey(f reflect.StructField) (name string, inline bool) {
	for _, tag := range []string{"yaml", "mapstructure"} {
		if v, ok := f.Tag.Lookup(tag); ok {
			name, opts, _ := strings.Cut(v, ",")
			inline = slices.Contains(strings.Split(opts, ","), "inline") || slices.Contains(strings.Split(opts, ","), "squash")
			if name == "" && !inline {
				name = strings.ToLower(f.Name)
			}
			return name, inline
		}
	}
	if f.Anonymous {
		return "", true
	}
	return strings.ToLower(f.Name), false
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// describe says what a node is, for "expected X, got Y"; never its value (it may be a secret).
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "true/false"
	}
	return "text"
}

// Find returns the node at a key path ("llm.model", "tools[1]") under root, or nil.
func Find(root *yaml.Node, key string) *yaml.Node {
	n := root
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, part := range splitKey(key) {
		if n == nil {
			return nil
		}
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part {
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(part); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		n = next
	}
	return n
}

// splitKey turns "a.b[2].c" into a, b, 2, c.
func splitKey(key string) []string {
	var out []string
	for _, p := range strings.Split(key, ".") {
		for {
			i := strings.IndexByte(p, '[')
			if i < 0 {
				break
			}
			if i > 0 {
				out = append(out, p[:i])
			}
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				break
			}
			out = append(out, p[i+1:i+j])
			p = p[i+j+1:]
		}
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// At is an error about the value at key in the document root of file: it carries the line of
// that value (or of the nearest key above it that the file has; 0 when none).
func At(file string, root *yaml.Node, key, format string, args ...any) *Error {
	e := &Error{File: file, Key: key, Msg: fmt.Sprintf(format, args...)}
	parts := splitKey(key)
	for len(parts) > 0 {
		if n := Find(root, joinParts(parts)); n != nil {
			e.Line = n.Line
			break
		}
		parts = parts[:len(parts)-1]
	}
	return e
}

func joinParts(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			fmt.Fprintf(&b, "[%s]", p)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

func yamlErrorLine(err error) int {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// textAfterQuote reports whether line's value starts with a quote and goes on after the
// quote that closes it (name: 'it's').
func textAfterQuote(line string) bool {
	_, v, ok := strings.Cut(line, ": ")
	v = strings.TrimSpace(v)
	if !ok || v == "" || (v[0] != '\'' && v[0] != '"') {
		return false
	}
	i := strings.IndexByte(v[1:], v[0])
	if i < 0 {
		return false
	}
	after := strings.TrimSpace(v[i+2:])
	return after != "" && !strings.HasPrefix(after, "#")
}

// maxLinesToLocate bounds errorLine's work (a parse per line): config files are far shorter.
const maxLinesToLocate = 2000

// errorLine is the line where data stops being YAML: the first line whose end, read from the
// top, gives the same error msg as the whole document. The YAML library's own line is not it:
// a parser error is given at the 0-based line of the collection it was in (the line before,
// or the line where that collection starts), and none at all on the first line. A prefix
// that fails otherwise (cut inside a [...] that closes further down) is passed over.
// reported is kept when no prefix gives msg, or data is too long to try.
func errorLine(data []byte, msg string, reported int) int {
	if bytes.Count(data, []byte("\n")) > maxLinesToLocate {
		return reported
	}
	end := 0
	for n := 1; end < len(data); n++ {
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data[:end], &doc); err != nil && cleanYAMLError(err.Error()) == msg {
			return n
		}
	}
	return reported
}

// syntaxHint says in words what usually causes the YAML library's message msg about line,
// or "".
func syntaxHint(msg, line string) string {
	indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
	switch {
	case strings.Contains(indent, "\t"):
		return " (this line is indented with a tab: YAML indents with spaces)"
	case strings.HasPrefix(msg, "did not find expected ',' or") && strings.Contains(line, "${"):
		return ` (inside {...} or [...] a ${VAR} needs quotes: "${VAR}")`
	case strings.HasPrefix(msg, "did not find expected ',' or"):
		return " (a {...} or [...] that starts here is not closed, or lacks a comma)"
	case msg == "mapping values are not allowed in this context":
		return ` (a key indented more than the one above it, or a value with ": " in it that needs quotes)`
	case msg == "did not find expected key" && textAfterQuote(line):
		return ` (text after a quoted value's closing quote: quote the whole value, and write a ' inside '...' as '')`
	case msg == "did not find expected key" && indent != "":
		return " (this line is indented less than the keys above it, and more than the section they are in)"
	case msg == "did not find expected '-' indicator":
		return " (a key among the items of a list: each item starts with -)"
	case msg == "found unexpected end of stream" && strings.ContainsAny(line, `"'`):
		return " (a quote opened on this line is never closed)"
	case msg == "found character that cannot start any token":
		return " (a value starting with @, ` or % needs quotes)"
	}
	return ""
}

// lineOf is the 1-based line n of data, "" when there is none.
func lineOf(data []byte, n int) string {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}

// cleanYAMLError drops the "yaml: " and "line N: " prefixes and any quoted value, which
// might be a secret.
func cleanYAMLError(msg string) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = regexp.MustCompile(`^line \d+: `).ReplaceAllString(msg, "")
	return regexp.MustCompile("`[^`]*`").ReplaceAllString(msg, "a value")
}
