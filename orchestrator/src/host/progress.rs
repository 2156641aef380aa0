//! Progress as a stream of events: indicatif renders them on a terminal,
//! plain lines otherwise (CI logs); tests can collect them.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Stage(String),
    RunStarted {
        dir: String,
        total: usize,
        already_done: usize,
    },
    BootStarted {
        index: u32,
        accel: String,
    },
    BootReady {
        index: u32,
        ready_ms: u64,
        uname: String,
    },
    PointStarted {
        id: String,
        label: String,
    },
    PointFinished {
        id: String,
        ok: bool,
        note: String,
    },
    Warn(String),
}

pub trait Progress {
    fn event(&mut self, e: Event);
}

/// Chooses the renderer for stderr.
pub fn for_terminal() -> Box<dyn Progress> {
    if std::io::stderr().is_terminal() {
        Box::new(Bars { bar: None })
    } else {
        Box::new(Lines)
    }
}

pub struct Lines;

impl Progress for Lines {
    fn event(&mut self, e: Event) {
        eprintln!("{}", render(&e));
    }
}

fn render(e: &Event) -> String {
    match e {
        Event::Stage(s) => format!("[testbed] {s}"),
        Event::RunStarted {
            dir,
            total,
            already_done,
        } => {
            format!("[testbed] run {dir}: {total} points, {already_done} already done")
        }
        Event::BootStarted { index, accel } => format!("[testbed] boot {index} ({accel})"),
        Event::BootReady {
            index,
            ready_ms,
            uname,
        } => {
            format!("[testbed] boot {index}: agent ready after {ready_ms} ms ({uname})")
        }
        Event::PointStarted { id, label } => format!("[testbed] point {id}: {label}"),
        Event::PointFinished { id, ok, note } => {
            format!(
                "[testbed] point {id}: {} {note}",
                if *ok { "done" } else { "FAILED" }
            )
        }
        Event::Warn(w) => format!("[testbed] warning: {w}"),
    }
}

struct Bars {
    bar: Option<ProgressBar>,
}

impl Progress for Bars {
    fn event(&mut self, e: Event) {
        match &e {
            Event::RunStarted {
                total,
                already_done,
                ..
            } => {
                let bar = ProgressBar::new(*total as u64);
                if let Ok(style) =
                    ProgressStyle::with_template("{bar:30} {pos}/{len} points  eta {eta}  {msg}")
                {
                    bar.set_style(style);
                }
                bar.set_position(*already_done as u64);
                bar.println(render(&e));
                self.bar = Some(bar);
            }
            Event::PointStarted { label, .. } => match &self.bar {
                Some(b) => b.set_message(label.clone()),
                None => eprintln!("{}", render(&e)),
            },
            Event::PointFinished { ok, .. } => match &self.bar {
                Some(b) => {
                    b.inc(1);
                    if !ok {
                        b.println(render(&e));
                    }
                }
                None => eprintln!("{}", render(&e)),
            },
            _ => match &self.bar {
                Some(b) => b.println(render(&e)),
                None => eprintln!("{}", render(&e)),
            },
        }
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Collects events (tests).
#[derive(Default)]
pub struct Collect(pub Vec<Event>);

impl Progress for Collect {
    fn event(&mut self, e: Event) {
        self.0.push(e);
    }
}
