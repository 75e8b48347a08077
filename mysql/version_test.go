package mysql

import "testing"

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"8.0.36":                     true,
		"8.4.2":                      true,
		"5.7.44-log":                 false,
		"10.11.19-MariaDB-0+deb12u1": true,
		"10.6.18-MariaDB":            true,
		"10.5.9-MariaDB":             false,
		"11.4.2-MariaDB":             true,
	} {
		if err := checkVersion(v); (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}
