package bench

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
}

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
	return savePair(bars, cdf, path)
}

// savePair writes two plots side by side as a PNG.
func savePair(left, right *plot.Plot, path string) error {
	img := vgimg.New(14*vg.Inch, 5*vg.Inch)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 3, PadTop: vg.Inch / 6, PadBottom: vg.Inch / 6, PadLeft: vg.Inch / 6, PadRight: vg.Inch / 6}
	canvases := plot.Align([][]*plot.Plot{{left, right}}, tiles, draw.New(img))
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
	return savePNG(img, path)
}

// barPlot is one bar per name.
func barPlot(title, yLabel string, names []string, values plotter.Values) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.Y.Label.Text = title, yLabel
	bars, err := plotter.NewBarChart(values, vg.Points(40))
	if err != nil {
		return nil, err
	}
	bars.Color = palette[0]
	p.Add(bars)
	p.NominalX(names...)
	return p, nil
}

func (rep *Report) throughputPlot() (*plot.Plot, error) {
	values := make(plotter.Values, len(rep.Relays))
	names := make([]string, len(rep.Relays))
	for i, r := range rep.Relays {
		values[i], names[i] = r.MaxLossFreePPS, r.Name
	}
	return barPlot(fmt.Sprintf("Max loss-free rate (loss <= %.1f%%), %s-byte payloads", 100*rep.Options.MaxLoss, firstSize(rep)),
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
		line.Color = palette[i%len(palette)]
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
func savePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WritePlot writes a PNG: each SFU's relay-core time per replica (bars)
// beside its ramp (p99 jitter against participants).
func (rep *SFUReport) WritePlot(path string) error {
	values := make(plotter.Values, len(rep.SFUs))
	names := make([]string, len(rep.SFUs))
	for i, s := range rep.SFUs {
		values[i], names[i] = s.RelayCoreNsPerReplica, s.Name
	}
	bars, err := barPlot(fmt.Sprintf("Relay core per replica, saturated (fanout %d)", rep.Fanout), "ns per replica", names, values)
	if err != nil {
		return err
	}

	ramp := plot.New()
	ramp.Title.Text = "Ramp: 10-party meetings on one core"
	ramp.X.Label.Text = "participants"
	ramp.Y.Label.Text = "p99 jitter of sampled receivers (ms)"
	for i, s := range rep.SFUs {
		var pts plotter.XYs
		for j, st := range s.Ramp {
			if j+1 < len(s.Ramp) && s.Ramp[j+1].Retry {
				continue // measured again: the retry stands
			}
			pts = append(pts, plotter.XY{X: float64(st.Participants), Y: st.JitterP99ms})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(2)
		ramp.Add(line)
		ramp.Legend.Add(s.Name, line)
	}
	return savePair(bars, ramp, path)
}
