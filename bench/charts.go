package main

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writeCharts writes, for the cost scenario on PostgreSQL and each worker count, throughput
// and the ratio to business alone against the round-trip time; other scenarios have tables
// only. It returns the files' names, relative to dir.
func (r *report) writeCharts(dir string) ([]string, error) {
	var files []string
	save := func(name string, p *plot.Plot) error {
		files = append(files, name)
		return p.Save(20*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, name))
	}
	for _, w := range r.opts.workers {
		for _, ratio := range []bool{false, true} {
			if p, ok := r.rttChart(w, ratio); ok {
				name := fmt.Sprintf("%s-cost-postgres-%dw.png", r.opts.name, w)
				if ratio {
					name = fmt.Sprintf("%s-cost-postgres-%dw-ratio.png", r.opts.name, w)
				}
				if err := save(name, p); err != nil {
					return nil, err
				}
			}
		}
	}
	return files, nil
}

// rttChart plots each variant of the cost scenario on PostgreSQL at workers against the
// measured round-trip time: its median throughput, or (ratio) its median ratio to business
// alone with the rounds' min–max as error bars.
func (r *report) rttChart(workers int, ratio bool) (*plot.Plot, bool) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("PostgreSQL, %d workers: median throughput against round-trip time", workers)
	p.Y.Label.Text = "messages per second"
	if ratio {
		p.Title.Text = fmt.Sprintf("PostgreSQL, %d workers: throughput ÷ business alone (median, min–max)", workers)
		p.Y.Label.Text = "÷ business alone, same round"
	}
	p.X.Label.Text = "round-trip time (ms, measured)"
	p.Legend.Top = true
	p.Legend.Left = ratio // throughput falls with the round trip, the ratios rise
	xmax, any := 0.0, false
	for i, v := range []string{vBusiness, vHand, vTx, vQueue, vWB} {
		var pts errPoints
		for _, d := range r.opts.delays {
			x, ok := r.find("cost", "postgres", d, workers, v)
			if !ok {
				continue
			}
			pt := errPoint{x: float64(x.rtt) / 1e6, y: x.rate.med}
			if ratio {
				pt = errPoint{x: pt.x, y: 1}
				if x.baseline != "" {
					pt.y, pt.lo, pt.hi = x.ratio.med, x.ratio.med-x.ratio.min, x.ratio.max-x.ratio.med
				}
			}
			pts = append(pts, pt)
			xmax = max(xmax, pt.x)
		}
		if len(pts) == 0 {
			continue
		}
		any = true
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, false
		}
		line.Color, points.Color, points.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		line.Width = vg.Points(1.5)
		p.Add(line, points)
		if ratio {
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return nil, false
			}
			bars.Color = plotutil.Color(i)
			p.Add(bars)
		}
		p.Legend.Add(v, line, points)
	}
	p.X.Min, p.X.Max = 0, xmax*1.05
	p.Y.Min = 0
	p.Y.Max *= 1.4 // room for the legend
	p.Add(plotter.NewGrid())
	return p, any
}

type errPoint struct{ x, y, lo, hi float64 }

type errPoints []errPoint

func (e errPoints) Len() int                        { return len(e) }
func (e errPoints) XY(i int) (float64, float64)     { return e[i].x, e[i].y }
func (e errPoints) YError(i int) (float64, float64) { return e[i].lo, e[i].hi }
