package report

import (
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WriteHTML writes a self-contained page: the tables, and for every
// measured scenario its latency distribution as an SVG bar chart on a log
// time axis (one bar per bucket, height the share of samples).
func (r *Run) WriteHTML(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var table strings.Builder
	r.WriteTable(&table)
	type chart struct {
		Name string
		SVG  template.HTML
	}
	var charts []chart
	for _, x := range r.Results {
		if x.NotRun != "" || x.Latency == nil || len(x.Latency.Buckets) == 0 {
			continue
		}
		charts = append(charts, chart{Name: fmt.Sprintf("%s — p50 %s ms, p99 %s ms, n=%d", x.Name, Ms(x.Latency.P50), Ms(x.Latency.P99), x.Latency.Count), SVG: template.HTML(svg(x))})
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return page.Execute(f, map[string]any{"Table": table.String(), "Charts": charts, "Started": r.StartedAt.Format(time.RFC3339)})
}

func svg(x *Result) string {
	const w, h, pad = 720.0, 160.0, 30.0
	bs := x.Latency.Buckets
	var total int64
	var peak int64
	for _, b := range bs {
		total += b.Count
		peak = max(peak, b.Count)
	}
	if total == 0 || peak == 0 {
		return ""
	}
	bw := (w - 2*pad) / float64(len(bs))
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="10" font-family="monospace">`, w, h+20)
	for i, b := range bs {
		bh := (h - pad) * float64(b.Count) / float64(peak)
		fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7ab5"><title>%s–%s ms: %d (%.1f%%)</title></rect>`,
			pad+float64(i)*bw, h-bh, math.Max(bw-1, 1), bh, Ms(b.Lo), Ms(b.Hi), b.Count, 100*float64(b.Count)/float64(total))
		if i%5 == 0 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f">%s</text>`, pad+float64(i)*bw, h+14, Ms(b.Lo))
		}
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"p50", x.Latency.P50}, {"p99", x.Latency.P99}} {
		for i, b := range bs {
			if p.d >= b.Lo && p.d < b.Hi || i == len(bs)-1 && p.d >= b.Lo {
				px := pad + float64(i)*bw + bw/2
				fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="10" y2="%.1f" stroke="#c33"/><text x="%.1f" y="10" fill="#c33">%s</text>`, px, px, h, px+2, p.name)
				break
			}
		}
	}
	sb.WriteString(`<text x="0" y="10">ms</text></svg>`)
	return sb.String()
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>voucherd bench {{.Started}}</title>
<style>body{font-family:sans-serif;margin:2em}pre{font-size:12px;background:#f6f6f6;padding:1em;overflow-x:auto}h2{font-size:14px;margin-top:2em}</style>
</head><body>
<h1>voucherd bench</h1>
<pre>{{.Table}}</pre>
<h1>Latency distributions</h1>
<p>Log-spaced buckets (ten per decade); hover a bar for its range and share.</p>
{{range .Charts}}<h2>{{.Name}}</h2>{{.SVG}}{{end}}
</body></html>
`))
