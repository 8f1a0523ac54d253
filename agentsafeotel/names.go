package agentsafeotel

import (
	"sync"
	"sync/atomic"

	"github.com/agentsafe/agentsafe/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxCachedNames bounds the procedures whose names are cached: governed
// procedures are few, but a strict engine refuses calls to any name a
// client sends, and those must not grow the cache.
const maxCachedNames = 4096

// nameCache keeps, per procedure, the attributes and span name its name
// gives, and the measurement options of its final metrics: computed once
// instead of on every execution.
type nameCache struct {
	m sync.Map // procedure → *procNames
	n atomic.Int64
}

type procNames struct {
	attrs []attribute.KeyValue // procedureAttrs; never modified
	span  string
	// codes holds the measurement options by final code, plain those
	// without one.
	codes     sync.Map // middleware.Code → metric.MeasurementOption
	plainOnce sync.Once
	plainOpt  metric.MeasurementOption
}

func (c *nameCache) get(procedure string) *procNames {
	if n, ok := c.m.Load(procedure); ok {
		return n.(*procNames)
	}
	n := &procNames{attrs: procedureAttrs(procedure), span: spanName(procedure)}
	if c.n.Load() >= maxCachedNames {
		return n
	}
	if prev, loaded := c.m.LoadOrStore(procedure, n); loaded {
		return prev.(*procNames)
	}
	c.n.Add(1)
	return n
}

// byCode is the measurement option of a final metric: the procedure and
// the code.
func (n *procNames) byCode(i *Instrumentation, code middleware.Code) metric.MeasurementOption {
	if o, ok := n.codes.Load(code); ok {
		return o.(metric.MeasurementOption)
	}
	o := n.option(i, keyCode.String(code.String()))
	n.codes.Store(code, o)
	return o
}

// plain is the measurement option of a metric of the procedure alone.
func (n *procNames) plain(i *Instrumentation) metric.MeasurementOption {
	n.plainOnce.Do(func() { n.plainOpt = n.option(i) })
	return n.plainOpt
}

func (n *procNames) option(i *Instrumentation, extra ...attribute.KeyValue) metric.MeasurementOption {
	attrs := make([]attribute.KeyValue, 0, len(i.system)+len(n.attrs)+len(extra))
	attrs = append(append(append(attrs, i.system...), n.attrs...), extra...)
	return metric.WithAttributes(attrs...)
}
