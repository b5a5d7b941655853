package main

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// heapSamplePeriod is how often measureMem reads the live heap.
const heapSamplePeriod = 2 * time.Millisecond

// measureMem runs f once and reports bytes allocated and the peak growth
// of the live heap while it ran.
func measureMem(f func() error) (alloc, peak uint64, err error) {
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var maxHeap atomic.Uint64
	maxHeap.Store(m0.HeapAlloc)
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if m.HeapAlloc > maxHeap.Load() {
			maxHeap.Store(m.HeapAlloc)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.Until(sample, heapSamplePeriod, stop)
	}()
	err = f()
	close(stop)
	wg.Wait()
	sample()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc, maxHeap.Load() - m0.HeapAlloc, err
}
