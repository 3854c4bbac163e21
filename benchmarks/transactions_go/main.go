// Command transactions_go is franz-go's consume-transform-produce loop for
// benchmarks/transactions.py: a kgo GroupTransactSession copies -per-txn records
// of -source to -dest per transaction, -txns times, and prints one JSON line per
// transaction (its latency from Begin to End's return) and a summary line.
//
// With -fill it first writes -txns x -per-txn records to -source (idempotent, not
// transactional), so every transaction finds its records already there and its
// latency is the transaction's own: produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type txnLine struct {
	Txn       int     `json:"txn"`
	Ms        float64 `json:"ms"`
	EndMs     float64 `json:"end_ms"`
	Committed bool    `json:"committed"`
}

type summary struct {
	Committed int     `json:"committed"`
	Aborted   int     `json:"aborted"`
	Seconds   float64 `json:"seconds"`
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma separated")
	source := flag.String("source", "", "the topic consumed")
	dest := flag.String("dest", "", "the topic produced to")
	group := flag.String("group", "", "the consumer group")
	txnID := flag.String("txn-id", "", "the transactional id")
	txns := flag.Int("txns", 30, "committed transactions to run")
	perTxn := flag.Int("per-txn", 1000, "records per transaction")
	fill := flag.Bool("fill", false, "first write txns x per-txn records to the source topic")
	debug := flag.Bool("debug", false, "kgo debug logging to stderr")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *source == "" || *dest == "" || *group == "" || *txnID == "" {
		fmt.Fprintln(os.Stderr, "-source, -dest, -group and -txn-id are required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	seeds := strings.Split(*brokers, ",")
	logLevel := kgo.LogLevelInfo
	if *debug {
		logLevel = kgo.LogLevelDebug
	}
	logger := kgo.BasicLogger(os.Stderr, logLevel, func() string { return time.Now().Format("15:04:05.000 ") })

	if *fill {
		if err := fillSource(ctx, seeds, *source, *txns**perTxn); err != nil {
			fmt.Fprintln(os.Stderr, "fill:", err)
			os.Exit(1)
		}
	}

	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(seeds...),
		kgo.WithLogger(logger),
		kgo.TransactionalID(*txnID),
		kgo.DefaultProduceTopic(*dest),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*source),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
		os.Exit(1)
	}
	defer sess.Close()

	out := json.NewEncoder(os.Stdout)
	var sum summary
	start := time.Now()
	for i := 0; sum.Committed < *txns; i++ {
		if err := sess.Begin(); err != nil {
			fmt.Fprintln(os.Stderr, "begin:", err)
			os.Exit(1)
		}
		t0 := time.Now()
		var produceErr error
		var mu sync.Mutex
		for n := 0; n < *perTxn; {
			fetches := sess.PollRecords(ctx, *perTxn-n)
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "poll:", ctx.Err())
				os.Exit(1)
			}
			fetches.EachError(func(t string, p int32, err error) {
				fmt.Fprintf(os.Stderr, "fetch %s[%d]: %v\n", t, p, err)
			})
			fetches.EachRecord(func(r *kgo.Record) {
				sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						produceErr = err
						mu.Unlock()
					}
				})
			})
			n += fetches.NumRecords()
		}
		e0 := time.Now()
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "end:", err)
			os.Exit(1)
		}
		if produceErr != nil {
			fmt.Fprintln(os.Stderr, "produce:", produceErr)
		}
		if committed {
			sum.Committed++
		} else {
			sum.Aborted++
		}
		_ = out.Encode(txnLine{Txn: i, Ms: ms(time.Since(t0)), EndMs: ms(time.Since(e0)), Committed: committed})
	}
	sum.Seconds = time.Since(start).Seconds()
	_ = out.Encode(sum)
}

func fillSource(ctx context.Context, seeds []string, topic string, count int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	value := []byte(strings.Repeat("v", 100))
	var mu sync.Mutex
	var failed error
	for i := 0; i < count; i++ {
		cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return failed
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
