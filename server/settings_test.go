package server

import "testing"

// Every SLUICE_* variable names a setting Set knows, and every setting has
// its variable: the two tables cannot drift apart.
func TestSettingsMatchEnv(t *testing.T) {
	inEnv := map[string]bool{}
	for _, e := range Env {
		inEnv[e.Setting] = true
		if _, ok := settings[e.Setting]; !ok {
			t.Errorf("%s names setting %q, which Set does not know", e.Name, e.Setting)
		}
	}
	for name := range settings {
		if !inEnv[name] {
			t.Errorf("setting %q has no SLUICE_* variable in Env", name)
		}
	}
}
