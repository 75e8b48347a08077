package leadership

import (
	"context"
	"log/slog"
	"time"
)

// hold keeps the term version in the database, lowered, until the instant
// until (in [Flag.now] units), for [FlagBuilder.HoldAtLeast]: it renews
// the term at once and then every RenewInterval, retrying failed renewals
// with the loop's backoff. It returns the version to release, or 0 when
// another process took the flag meanwhile (the term had expired unrenewed)
// and there is nothing left to release. The loop has exited, so hold may
// use its fields.
func (f *Flag) hold(version, until int64) int64 {
	ctx := context.WithoutCancel(f.loopCtx)
	f.log.LogAttrs(ctx, slog.LevelInfo, "holding the flag after Close",
		slog.Int64("version", version), slog.Duration("for", time.Duration(until-f.now()).Round(time.Millisecond)))
	f.failures = 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		<-timer.C
		if f.now() >= until {
			return version
		}
		actx, cancel := context.WithTimeout(ctx, f.c.timeout)
		res, err := f.c.store.Acquire(actx, Request{Name: f.c.name, Holder: f.c.process, Version: version, Lease: f.c.lease})
		cancel()
		wait := f.c.renewInterval
		switch {
		case err != nil:
			f.m.countError("acquire")
			f.failures++
			f.log.LogAttrs(ctx, slog.LevelWarn, "renewal during the hold failed",
				slog.Int64("version", version), slog.Int("failures", f.failures), slog.Any("error", err))
			wait = f.retryDelay(true)
		case !res.Acquired:
			f.log.LogAttrs(ctx, slog.LevelWarn, "flag taken by another process during the hold",
				slog.Int64("version", version), slog.String("holder", res.Holder))
			return 0
		default:
			f.failures = 0
			version = res.Version // a new term if ours expired unrenewed and nobody took it
		}
		timer.Reset(min(wait, time.Duration(until-f.now())))
	}
}
