package leadership_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dbflag/leadership"
)

// TestNamesThatCouldDeceiveATerminalAreRefused: control characters (Cc)
// and format characters (Cf: bidirectional overrides, zero-width
// characters) cannot be part of a flag name or holder, while the other
// hostile names the stores round-trip (quotes, backslashes, line and
// paragraph separators, emoji, 255 bytes) stay valid.
func TestNamesThatCouldDeceiveATerminalAreRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"evil\u202Eexe.sh",    // RIGHT-TO-LEFT OVERRIDE
		"a\u2066b\u2069",      // LEFT-TO-RIGHT ISOLATE ... POP DIRECTIONAL ISOLATE
		"nightly\u200Breport", // ZERO WIDTH SPACE
		"\u200Fx",             // RIGHT-TO-LEFT MARK
		"bom\uFEFF",           // ZERO WIDTH NO-BREAK SPACE
		"soft\u00ADhyphen",    // SOFT HYPHEN
		"tag\U000E0041",       // TAG LATIN CAPITAL LETTER A
		"esc\x1b]0;title\x07", // Cc, refused before
		"cr\rforged row",
		"del\x7f",
		"c1\u009b2J",
	} {
		err := leadership.ValidateName("name", name)
		if !errors.Is(err, leadership.ErrInvalidArgument) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidArgument", name, err)
			continue
		}
		// The error quotes the name: no raw control or format character
		// reaches a terminal through it.
		for _, r := range err.Error() {
			if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' || r == '\u2066' || r == '\u200b' || r == '\u200f' || r == '\ufeff' || r == '\u00ad' {
				t.Errorf("ValidateName(%q)'s error carries %U raw: %q", name, r, err.Error())
			}
		}
	}
	for _, name := range []string{`quote"d`, `back\slash`, "it's", "'); DROP TABLE leadership_flags; --", "line\u2028para\u2029end",
		"emoji 🚩", "ünïcödé", "日本語", "with space", strings.Repeat("x", leadership.MaxNameLength)} {
		if err := leadership.ValidateName("name", name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
}
