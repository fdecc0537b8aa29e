// Command trim cuts an ack log (ratecontrol.AckLog) to the shaped
// receiver's link, from 5 s before it was shaped until 5 s after it was
// lifted, for recorded_test.go's testdata.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: trim ACKLOG")
		os.Exit(2)
	}
	if err := trim(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "trim:", err)
		os.Exit(1)
	}
}

func trim(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	acks, marks, err := ratecontrol.ReadAckLog(f)
	if err != nil {
		return err
	}
	var from, until time.Duration
	var receiver string
	for _, m := range marks {
		if fields := strings.Fields(m.Text); len(fields) == 3 && fields[0] == "shaped" {
			from, receiver = m.Now-5*time.Second, fields[2]
		} else if m.Text == "lifted" && until == 0 {
			until = m.Now + 5*time.Second
		}
	}
	if receiver == "" || until == 0 {
		return fmt.Errorf("%s has no shaped and lifted marks", path)
	}
	w := bufio.NewWriter(os.Stdout)
	log := ratecontrol.NewAckLog(w)
	for _, m := range marks {
		log.Mark(m.Now, m.Text)
	}
	for _, a := range acks {
		if a.Link == receiver && a.Now >= from && a.Now <= until {
			log.Acks(a.Now, a.Link, a.Leg, []ratecontrol.Ack{a.Ack})
		}
	}
	return w.Flush()
}
