//! Progress bars on stderr (indicatif), hidden when stderr is not a terminal (logs stay clean in
//! CI): the binary's side of af-pipeline's `Progress`.

use indicatif::{ProgressBar, ProgressStyle};

pub struct Bars;

impl af_pipeline::Progress for Bars {
    fn bar(&self, what: &str, total: u64) -> Box<dyn af_pipeline::Bar> {
        Box::new(Bar(bar(total, what)))
    }
}

struct Bar(ProgressBar);

impl af_pipeline::Bar for Bar {
    fn inc(&self, steps: u64) {
        self.0.inc(steps);
    }
    fn set_position(&self, position: u64) {
        self.0.set_position(position);
    }
    fn set_length(&self, total: u64) {
        self.0.set_length(total);
    }
    fn set_message(&self, message: String) {
        self.0.set_message(message);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

pub fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:40}] {human_pos}/{human_len} {per_sec} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
