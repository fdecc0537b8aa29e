package turnbench

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/ebrtc/ebrtc/internal/bench"
)

// WritePlot writes a PNG: max loss-free rate per relay (bars) beside the
// latency CDF of every relay at the common rate.
func (rep *Report) WritePlot(path string) error {
	bars, err := rep.throughputPlot()
	if err != nil {
		return err
	}
	cdf, err := rep.latencyPlot()
	if err != nil {
		return err
	}
	return bench.SavePair(bars, cdf, path)
}

func (rep *Report) throughputPlot() (*plot.Plot, error) {
	values := make(plotter.Values, len(rep.Relays))
	names := make([]string, len(rep.Relays))
	for i, r := range rep.Relays {
		values[i], names[i] = r.MaxLossFreePPS, r.Name
	}
	return bench.BarPlot(fmt.Sprintf("Max loss-free rate (loss <= %.1f%%), %s-byte payloads", 100*rep.Options.MaxLoss, firstSize(rep)),
		"datagrams/s (both directions)", names, values)
}

func (rep *Report) latencyPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("One-way latency CDF at %.0f datagrams/s", rep.Options.CostRate)
	p.X.Label.Text = "latency (µs, log scale)"
	p.Y.Label.Text = "fraction of datagrams"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	p.Legend.Top = false
	p.Legend.Left = false
	for i, r := range rep.Relays {
		if len(r.cdfX) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(r.cdfX))
		for j := range r.cdfX {
			pts[j].X, pts[j].Y = max(r.cdfX[j], 1), r.cdfY[j]
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.Color = bench.Color(i)
		line.Width = vg.Points(2)
		p.Add(line)
		p.Legend.Add(r.Name, line)
	}
	return p, nil
}

func firstSize(rep *Report) string {
	if len(rep.Relays) > 0 && len(rep.Relays[0].Sizes) > 0 {
		return rep.Relays[0].Sizes[0].Size
	}
	return "?"
}
