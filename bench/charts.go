package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writeCharts writes a grouped bar chart of median throughput per scenario and database, and
// the growth curve; it returns the files' names, relative to dir.
func (r *report) writeCharts(dir string) ([]string, error) {
	var files []string
	type key struct{ scenario, db string }
	var keys []key
	for _, x := range r.rows {
		k := key{x.scenario, x.db}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		name := fmt.Sprintf("%s-%s-%s.png", r.opts.name, k.scenario, k.db)
		if err := r.barChart(filepath.Join(dir, name), k.scenario, k.db); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	if len(r.growth) > 0 {
		name := r.opts.name + "-growth-curve.png"
		if err := r.growthChart(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

func (r *report) barChart(path, scenario, db string) error {
	var variants []string
	var workers []int
	for _, x := range r.rows {
		if x.scenario != scenario || x.db != db {
			continue
		}
		if !slices.Contains(variants, x.variant) {
			variants = append(variants, x.variant)
		}
		if !slices.Contains(workers, x.workers) {
			workers = append(workers, x.workers)
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s on %s: median throughput", chartTitles[scenario], db)
	p.Y.Label.Text = "messages per second"
	p.X.Label.Text = "concurrent workers"
	p.Legend.Top = true
	p.Legend.Left = true
	width := vg.Points(380 / float64(len(workers)*len(variants))) // the groups fill ~2/3 of the width
	for i, v := range variants {
		values := make(plotter.Values, len(workers))
		for j, w := range workers {
			if x, ok := r.findRow(scenario, db, w, v); ok {
				values[j] = x.rate.med
			}
		}
		bars, err := plotter.NewBarChart(values, width)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = vg.Length(0)
		bars.Color = plotutil.Color(i)
		bars.Offset = width * vg.Length(float64(i)-float64(len(variants)-1)/2)
		p.Add(bars)
		p.Legend.Add(v, bars)
	}
	labels := make([]string, len(workers))
	for j, w := range workers {
		labels[j] = fmt.Sprint(w)
	}
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.6, float64(len(workers))-0.4 // room for the outer bars
	p.Y.Min = 0
	p.Y.Max *= 1.45 // room for the legend
	p.Add(plotter.NewGrid())
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
}

var chartTitles = map[string]string{
	"direct":   "Direct store",
	"router":   "Watermill router (gochannel, K topics)",
	"growth":   "Claims into a filled inbox",
	"cleanup":  "Claims with and without a cleanup",
	"produced": "Produced messages",
}

// growthChart plots, per kind of key and worker count, the median of the per-round ratios
// of claims/s to the empty inbox's, with the rounds' min–max as error bars.
func (r *report) growthChart(path string) error {
	p := plot.New()
	p.Title.Text = "Growth: claims/s relative to the empty inbox (median, min–max)"
	p.X.Label.Text = "rows already in the inbox (millions)"
	p.Y.Label.Text = "claims/s ÷ claims/s into the empty inbox"
	p.Legend.Top = true
	p.Legend.Left = true
	type key struct {
		ids     string
		workers int
	}
	var keys []key
	for _, g := range r.growth {
		k := key{g.ids, g.workers}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	ymax := 1.0
	for _, k := range keys {
		var pts errPoints
		for _, g := range r.growth {
			if g.ids != k.ids || g.workers != k.workers {
				continue
			}
			pt := errPoint{x: float64(g.rows) / 1e6, y: 1}
			if g.rows > 0 {
				x, ok := r.findRow("growth", "postgres", g.workers, growthName(g.ids, g.rows))
				if !ok {
					continue
				}
				pt.y, pt.lo, pt.hi = x.ratio.med, x.ratio.med-x.ratio.min, x.ratio.max-x.ratio.med
				ymax = max(ymax, x.ratio.max)
			}
			pts = append(pts, pt)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		c := plotutil.Color(slices.Index(r.opts.workers, k.workers))
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		if k.ids == "v4" {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			points.Shape = plotutil.Shape(1)
		}
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return err
		}
		bars.Color = c
		p.Add(line, points, bars)
		p.Legend.Add(fmt.Sprintf("%s keys, %d workers", k.ids, k.workers), line, points)
	}
	target := plotter.NewFunction(func(float64) float64 { return 0.8 })
	target.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	target.Color = color.Gray{Y: 90}
	p.Add(target)
	p.Legend.Add("target 0.8", target)
	p.Y.Min = 0
	p.Y.Max = ymax * 1.4
	p.Add(plotter.NewGrid())
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
}

type errPoint struct{ x, y, lo, hi float64 }

type errPoints []errPoint

func (e errPoints) Len() int                        { return len(e) }
func (e errPoints) XY(i int) (float64, float64)     { return e[i].x, e[i].y }
func (e errPoints) YError(i int) (float64, float64) { return e[i].lo, e[i].hi }
