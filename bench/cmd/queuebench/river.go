package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River's fetch timers tuned as in the comparison we were asked to repeat:
// fetch at most every 2 ms, poll every 20 ms when no notification comes.
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// requestBody is the job payload of every system: a small Messages request.
const requestBody = `{"model":"claude-haiku","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`

type noopArgs struct {
	Body string `json:"body"`
}

func (noopArgs) Kind() string { return "noop" }

// noopWorker starts and finishes at once; started is set by start.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	started atomic.Pointer[func()]
}

func (w *noopWorker) Work(ctx context.Context, job *river.Job[noopArgs]) error {
	if f := w.started.Load(); f != nil {
		(*f)()
	}
	return nil
}

type riverSystem struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	worker *noopWorker
	drop   func() error
	stop   func()
}

// freshSchema drops and recreates schema and returns a pool whose
// search_path is it, and a func that drops it again.
func freshSchema(ctx context.Context, base, schema string, maxConns int32) (*pgxpool.Pool, func() error, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		return nil, nil, fmt.Errorf("creating schema %s: %w", schema, err)
	}
	pcfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return nil, nil, err
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pcfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	drop := func() error {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		return err
	}
	return pool, drop, nil
}

func openRiver(ctx context.Context, cfg config) (system, error) {
	const schema = "queuebench_river"
	pool, drop, err := freshSchema(ctx, cfg.postgres, schema, 24)
	if err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrating river: %w", err)
	}
	w := &noopWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.workers}},
		Workers:           workers,
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Schema:            schema,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &riverSystem{pool: pool, client: client, worker: w, drop: drop}, nil
}

func (s *riverSystem) fill(ctx context.Context, n int) error {
	for done := 0; done < n; {
		k := min(5000, n-done)
		params := make([]river.InsertManyParams, k)
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{Body: requestBody}}
		}
		if _, err := s.client.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("filling river: %w", err)
		}
		done += k
	}
	return nil
}

func (s *riverSystem) start(ctx context.Context, started, done func()) error {
	s.worker.started.Store(&started)
	// Completion events are sent once the completer has written the job,
	// so they count durable completions. The buffer is large enough that
	// none is dropped.
	events, cancel := s.client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 1 << 21, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for range events {
			done()
		}
	}()
	s.stop = func() { cancel(); <-finished }
	return s.client.Start(ctx)
}

func (s *riverSystem) submit(ctx context.Context) error {
	_, err := s.client.Insert(ctx, noopArgs{Body: requestBody}, nil)
	return err
}

func (s *riverSystem) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.client.Stop(ctx)
	if s.stop != nil {
		s.stop()
	}
	s.pool.Close()
	return errors.Join(err, s.drop())
}
