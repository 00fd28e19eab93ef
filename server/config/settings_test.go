package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// yamlLeaves returns every setting of the config file: the dotted path of
// each field that is not a struct of further fields, with its value in v.
func yamlLeaves(v reflect.Value, prefix string, out map[string]reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct {
			yamlLeaves(f, prefix+tag+".", out)
			continue
		}
		out[prefix+tag] = f
	}
}

// fieldsOf are the config file fields a setting names.
func fieldsOf(s Setting) []string {
	paths, _, _ := strings.Cut(s.Fields, " (")
	return strings.Split(paths, ", ")
}

// TestSettingsTableComplete walks the config file's fields and the one
// settings table: every field is reachable through a setting (so by a
// SLUICE_* variable and a flag), every setting names real fields and a
// variable spelled from its name, has a flag or says why not, and sets
// exactly the fields it names.
func TestSettingsTableComplete(t *testing.T) {
	var zero Config
	leaves := map[string]reflect.Value{}
	yamlLeaves(reflect.ValueOf(&zero).Elem(), "", leaves)
	covered := map[string]string{}
	seen := map[string]bool{}
	for _, s := range Settings {
		if want := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_")); s.Env != want {
			t.Errorf("setting %s: variable %q, want %q", s.Name, s.Env, want)
		}
		if seen[s.Name] {
			t.Errorf("setting %s: twice in the table", s.Name)
		}
		seen[s.Name] = true
		for _, f := range fieldsOf(s) {
			if _, ok := leaves[f]; !ok {
				t.Errorf("setting %s: names %q, not a field of the config file", s.Name, f)
			}
			covered[f] = s.Name
		}
		checkSetsItsFields(t, s)
	}
	for path := range leaves {
		if covered[path] == "" {
			t.Errorf("config file field %s: no setting (no SLUICE_* variable, no flag): add a row to Settings", path)
		}
	}
}

// checkSetsItsFields sets s on a zero Config with a value of its kind and
// checks that the fields it names changed and no other did; a boolean
// setting must be one of a boolean field.
func checkSetsItsFields(t *testing.T, s Setting) {
	t.Helper()
	var c Config
	var set error
	for _, v := range []string{"true", "7", "0.5", "7s", "a,b", "peer", "sentinel:m"} {
		if set = c.Set(s.Name, "--"+s.Name, v); set == nil {
			break
		}
	}
	if set != nil {
		t.Errorf("setting %s: no value sets it: %v", s.Name, set)
		return
	}
	leaves := map[string]reflect.Value{}
	yamlLeaves(reflect.ValueOf(&c).Elem(), "", leaves)
	mine, changed, allBool := fieldsOf(s), false, true
	for path, v := range leaves {
		isMine := strings.Contains(","+strings.Join(mine, ",")+",", ","+path+",")
		if !v.IsZero() && !isMine {
			t.Errorf("setting %s: sets %s, which it does not name", s.Name, path)
		}
		if isMine && !v.IsZero() {
			changed = true
		}
		kind := v.Type()
		if kind.Kind() == reflect.Pointer {
			kind = kind.Elem()
		}
		if isMine && kind.Kind() != reflect.Bool {
			allBool = false
		}
	}
	if allBool != s.Bool() {
		t.Errorf("setting %s: Bool() is %v, but its fields %v are booleans: %v", s.Name, s.Bool(), mine, allBool)
	}
	if !changed {
		t.Errorf("setting %s: sets none of %v", s.Name, mine)
	}
}

// settingsDoc renders Settings as the Markdown table of docs/serve.md.
func settingsDoc() string {
	var b strings.Builder
	b.WriteString("| flag | variable | config field | what it sets |\n|---|---|---|---|\n")
	for _, s := range Settings {
		flag := "`--" + s.Name + "`"
		if s.NoFlag != "" {
			flag = "none: " + s.NoFlag
		}
		help := strings.ReplaceAll(s.Help, "|", `\|`)
		fmt.Fprintf(&b, "| %s | `%s` | `%s` | %s |\n", flag, s.Env, s.Fields, help)
	}
	return b.String()
}

// TestSettingsDoc: docs/serve.md's table of settings is the one made from
// Settings, so that it lists every setting with its help. With
// SLUICE_WRITE_DOCS=1 it writes the table instead.
func TestSettingsDoc(t *testing.T) {
	const path = "../../docs/serve.md"
	const begin, end = "<!-- settings: begin -->\n", "<!-- settings: end -->"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(b), begin)
	table, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no %q ... %q section", path, begin, end)
	}
	want := settingsDoc()
	if table == want {
		return
	}
	if os.Getenv("SLUICE_WRITE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the table of settings is not the one server.Settings makes; run SLUICE_WRITE_DOCS=1 go test -run TestSettingsDoc ./server/config", path)
}
