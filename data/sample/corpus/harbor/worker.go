// Package worker runs Harbor jobs and keeps their leases alive with heartbeats.
package worker

import (
	"context"
	"time"
)

// Lease is a job held by this worker until Deadline.
type Lease struct {
	JobID    string
	Deadline time.Time
}

// Queue is the part of the Harbor queue a worker needs.
type Queue interface {
	Extend(ctx context.Context, jobID string, by time.Duration) (time.Time, error)
	Ack(ctx context.Context, jobID string) error
	Fail(ctx context.Context, jobID string, err error) error
}

// Heartbeat extends the lease every interval until ctx is cancelled. A worker that
// stops heartbeating (it crashed or hung) loses the lease and the job is retried elsewhere.
func Heartbeat(ctx context.Context, q Queue, lease *Lease, interval, by time.Duration) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			deadline, err := q.Extend(ctx, lease.JobID, by)
			if err != nil {
				return err
			}
			lease.Deadline = deadline
		}
	}
}

// Drain stops taking new jobs and waits up to grace for running jobs to finish, so a
// deploy does not turn every in-flight job into a retry.
func Drain(running <-chan struct{}, grace time.Duration) bool {
	select {
	case <-running:
		return true
	case <-time.After(grace):
		return false
	}
}
