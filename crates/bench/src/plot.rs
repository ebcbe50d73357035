//! `--plot DIR`: SVG charts of a run. TTFT and ITL CDFs (one line per load
//! level), throughput vs load, and p99 latencies vs load.

use crate::report::LevelRun;
use crate::summary::Dist;
use crate::{Error, Result};
use plotters::prelude::*;
use std::path::Path;

fn err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Output {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

type Series = (String, Vec<(f64, f64)>);

fn lines(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series]) -> Result<()> {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut xmax, mut ymax) = (0.0f64, 0.0f64);
    for &(x, y) in pts {
        xmax = xmax.max(x);
        ymax = ymax.max(y);
    }
    let (xmax, ymax) = (xmax.max(1e-9) * 1.05, ymax.max(1e-9) * 1.05);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(|e| err(path, e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(path, e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(path, e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))
}

/// Empirical CDF points (at most ~500, evenly thinned).
fn cdf(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = n.div_ceil(500).max(1);
    let mut out: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (v[i], (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&last) = v.last() {
        out.push((last, 1.0));
    }
    out
}

/// Writes `ttft_cdf.svg`, `itl_cdf.svg`, `throughput.svg` and
/// `p99_latency.svg` into `dir`; returns their paths.
pub fn write(dir: &Path, levels: &[LevelRun]) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    let measured = |l: &LevelRun| {
        l.records
            .iter()
            .filter(|r| !r.warmup && r.ok)
            .cloned()
            .collect::<Vec<_>>()
    };
    let ttft: Vec<Series> = levels
        .iter()
        .map(|l| {
            (
                l.summary.label.clone(),
                cdf(measured(l).iter().filter_map(|r| r.ttft_ms).collect()),
            )
        })
        .collect();
    let itl: Vec<Series> = levels
        .iter()
        .map(|l| {
            let v = measured(l).iter().flat_map(|r| r.itl_ms.clone()).collect();
            (l.summary.label.clone(), cdf(v))
        })
        .collect();
    let x_desc = match levels.first().map(|l| l.summary.load) {
        Some(crate::Load::Rate { .. }) => "offered load (requests/s)",
        _ => "concurrency",
    };
    let by_load = |f: &dyn Fn(&crate::Summary) -> Option<f64>| -> Vec<(f64, f64)> {
        levels
            .iter()
            .filter_map(|l| Some((l.summary.load.value(), f(&l.summary)?)))
            .collect()
    };
    let p99 = |d: &Option<Dist>| d.as_ref().map(|d| d.p99);
    let files = [
        (
            "ttft_cdf.svg",
            "TTFT CDF",
            "TTFT (ms)",
            "fraction of requests",
            ttft,
        ),
        (
            "itl_cdf.svg",
            "ITL CDF",
            "ITL (ms)",
            "fraction of tokens",
            itl,
        ),
        (
            "throughput.svg",
            "Throughput vs load",
            x_desc,
            "per second",
            vec![
                (
                    "output tokens/s".into(),
                    by_load(&|s| Some(s.output_tokens_per_s)),
                ),
                (
                    "requests/s x100".into(),
                    by_load(&|s| Some(s.requests_per_s * 100.0)),
                ),
            ],
        ),
        (
            "p99_latency.svg",
            "p99 latency vs load",
            x_desc,
            "ms",
            vec![
                ("TTFT p99".into(), by_load(&|s| p99(&s.ttft))),
                ("ITL p99".into(), by_load(&|s| p99(&s.itl))),
                ("E2E p99".into(), by_load(&|s| p99(&s.e2e))),
            ],
        ),
    ];
    let mut out = Vec::new();
    for (name, title, xd, yd, series) in files {
        let path = dir.join(name);
        lines(&path, title, xd, yd, &series)?;
        out.push(path.display().to_string());
    }
    Ok(out)
}
