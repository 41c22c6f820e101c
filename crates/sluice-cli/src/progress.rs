//! The progress spinner on stderr, and a log writer that stays out of its way.
//!
//! The spinner draws only when stderr is a terminal: indicatif's
//! `ProgressDrawTarget::stderr()` turns itself into a hidden target when
//! stderr is redirected (or `TERM` is `dumb`), so piped output and CI logs
//! never see escape codes.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice::MetricsSnapshot;

/// How often the spinner's figures are refreshed.
pub const REFRESH: Duration = Duration::from_millis(100);

/// The spinner currently on screen, if any; shared with the log writer.
#[derive(Clone, Default)]
pub struct ProgressSlot(Arc<Mutex<Option<ProgressBar>>>);

impl ProgressSlot {
    fn current(&self) -> Option<ProgressBar> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, bar: Option<ProgressBar>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = bar;
    }

    /// Show a spinner, if stderr is a terminal.
    pub fn start(&self) -> Spinner {
        let target = ProgressDrawTarget::stderr();
        if target.is_hidden() {
            return Spinner {
                bar: None,
                slot: self.clone(),
            };
        }
        let bar = ProgressBar::with_draw_target(None, target);
        if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed} {msg}") {
            bar.set_style(style);
        }
        bar.set_message(status_line(0, i64::MIN, 0));
        self.replace(Some(bar.clone()));
        Spinner {
            bar: Some(bar),
            slot: self.clone(),
        }
    }

    /// A writer for one log event.
    pub fn log_writer(&self) -> LogWriter {
        LogWriter {
            bar: self.current(),
        }
    }
}

/// The running spinner; cleared from the screen when finished or dropped.
pub struct Spinner {
    bar: Option<ProgressBar>,
    slot: ProgressSlot,
}

impl Spinner {
    /// Show the latest figures.
    pub fn update(&self, metrics: &MetricsSnapshot) {
        if let Some(bar) = &self.bar {
            bar.set_message(status_line(
                metrics.rows_in(),
                metrics.watermark,
                metrics.rows_emitted(),
            ));
            bar.tick();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            self.slot.replace(None);
            bar.finish_and_clear();
        }
    }
}

/// Writes to stderr with the spinner hidden for the duration of the write.
pub struct LogWriter {
    bar: Option<ProgressBar>,
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.bar {
            Some(bar) => bar.suspend(|| io::stderr().write(buf)),
            None => io::stderr().write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &self.bar {
            Some(bar) => bar.suspend(|| io::stderr().write_all(buf)),
            None => io::stderr().write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// `1200 rows read · watermark 2024-05-01T12:00:04Z · 37 rows emitted`
/// (whole seconds, so the line fits an 80-column terminal).
pub fn status_line(rows_in: u64, watermark: i64, rows_emitted: u64) -> String {
    format!(
        "{rows_in} rows read · watermark {} · {rows_emitted} rows emitted",
        format_watermark(watermark)
    )
}

/// A watermark in milliseconds as a UTC timestamp (to the second); `-` before the first
/// one and `end` once every source has finished.
pub fn format_watermark(ms: i64) -> String {
    match ms {
        i64::MIN => "-".to_string(),
        i64::MAX => "end".to_string(),
        ms => match chrono::DateTime::from_timestamp_millis(ms) {
            Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            None => format!("{ms} ms"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_formats() {
        assert_eq!(format_watermark(i64::MIN), "-");
        assert_eq!(format_watermark(i64::MAX), "end");
        assert_eq!(format_watermark(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_watermark(1_714_564_804_250), "2024-05-01T12:00:04Z");
    }

    #[test]
    fn status_line_before_any_data() {
        assert_eq!(
            status_line(0, i64::MIN, 0),
            "0 rows read · watermark - · 0 rows emitted"
        );
        assert_eq!(
            status_line(200, i64::MAX, 57),
            "200 rows read · watermark end · 57 rows emitted"
        );
    }
}
