//go:build !linux

package leadership

import "time"

// osClocks returns zeros: outside Linux no clock pair is read and no
// suspend is detected (see the package documentation).
func osClocks() (mono, boot time.Duration) { return 0, 0 }
