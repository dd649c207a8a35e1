package wstransport

import (
	"sync"
	"time"
)

// scheduler keeps every connection's next timer event (init timeout,
// keep-alive ping, scheduled close) in one min-heap served by one
// goroutine, which exists only while the heap is not empty. A due
// connection is handed to the worker pool; the scheduler itself never
// writes to a socket, so a stuck client cannot delay anyone's ping.
type scheduler struct {
	pool *pool

	mu      sync.Mutex
	heap    []*Conn
	running bool
	wake    chan struct{}
}

// set makes t the connection's next event (zero: none).
func (s *scheduler) set(c *Conn, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.IsZero() {
		if c.heapIdx >= 0 {
			s.remove(c.heapIdx)
			if len(s.heap) == 0 && s.running {
				s.signal() // let the loop end now rather than at its timer
			}
		}
		return
	}
	if c.heapIdx >= 0 {
		if c.wake.Equal(t) {
			return
		}
		c.wake = t
		s.fix(c.heapIdx)
	} else {
		c.wake = t
		c.heapIdx = len(s.heap)
		s.heap = append(s.heap, c)
		s.up(c.heapIdx)
	}
	if !s.running {
		s.running = true
		if s.wake == nil {
			s.wake = make(chan struct{}, 1)
		}
		go s.run()
	} else if s.heap[0] == c {
		s.signal() // a new earliest event: the loop may be sleeping past it
	}
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scheduler) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*Conn
	for {
		s.mu.Lock()
		if len(s.heap) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		for len(s.heap) > 0 && !s.heap[0].wake.After(now) {
			due = append(due, s.heap[0])
			s.remove(0)
		}
		var wait time.Duration
		if len(s.heap) > 0 {
			wait = s.heap[0].wake.Sub(now)
		}
		s.mu.Unlock()
		if len(due) > 0 {
			for i, c := range due {
				c.timerFired()
				due[i] = nil
			}
			due = due[:0]
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
		}
	}
}

func (s *scheduler) less(i, j int) bool { return s.heap[i].wake.Before(s.heap[j].wake) }

func (s *scheduler) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].heapIdx = i
	s.heap[j].heapIdx = j
}

func (s *scheduler) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *scheduler) down(i int) bool {
	start := i
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			break
		}
		s.swap(i, m)
		i = m
	}
	return i > start
}

func (s *scheduler) fix(i int) {
	if !s.down(i) {
		s.up(i)
	}
}

func (s *scheduler) remove(i int) {
	last := len(s.heap) - 1
	c := s.heap[i]
	if i != last {
		s.swap(i, last)
	}
	s.heap[last] = nil
	s.heap = s.heap[:last]
	if i != last {
		s.fix(i)
	}
	c.heapIdx = -1
	if len(s.heap) == 0 && cap(s.heap) > 1024 {
		s.heap = nil // do not keep a peak's worth of slots
	}
}

// pool runs connections' pending work (ready subscriptions, due timers) on
// at most max goroutines, started on demand. A worker that finds the queue
// empty waits up to workerLinger for more before it exits: at a steady
// trickle of events (a thousand a second is one every millisecond) a
// worker that exited at once would be started again for nearly every
// event, and each new goroutine grows its stack again through gqlgen's deep
// rendering (about a third of a rendering's CPU, profiled). With no events
// for workerLinger there is no worker. A connection is queued at most once
// at a time (Conn.scheduled).
type pool struct {
	max int

	mu      sync.Mutex
	queue   []*Conn
	head    int
	running int
	// idle counts the waiting workers no push has claimed yet; a push
	// claims one by sending it a token on wake.
	idle int
	wake chan struct{}
}

// workerLinger is how long a worker without work waits for more.
const workerLinger = time.Second

func (p *pool) push(c *Conn) {
	p.mu.Lock()
	p.queue = append(p.queue, c)
	start := false
	switch {
	case p.idle > 0:
		p.idle--
		p.wake <- struct{}{} // buffered for every worker: never blocks
	case p.running < p.max:
		p.running++
		start = true
		if p.wake == nil {
			p.wake = make(chan struct{}, p.max)
		}
	}
	p.mu.Unlock()
	if start {
		go p.work()
	}
}

func (p *pool) work() {
	var linger *time.Timer
	for {
		p.mu.Lock()
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
			if cap(p.queue) > 4096 {
				p.queue = nil
			}
			p.idle++
			p.mu.Unlock()
			if linger == nil {
				linger = time.NewTimer(workerLinger)
			} else {
				linger.Reset(workerLinger)
			}
			select {
			case <-p.wake:
				linger.Stop()
				continue
			case <-linger.C:
			}
			p.mu.Lock()
			select {
			case <-p.wake:
				// Claimed while the timer fired: the token is ours.
				p.mu.Unlock()
				continue
			default:
			}
			p.idle--
			p.running--
			p.mu.Unlock()
			return
		}
		c := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		if p.head > 1024 && p.head*2 > len(p.queue) {
			n := copy(p.queue, p.queue[p.head:])
			clear(p.queue[n:])
			p.queue, p.head = p.queue[:n], 0
		}
		p.mu.Unlock()
		c.work()
	}
}
