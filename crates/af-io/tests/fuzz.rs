//! The readers' mutation fuzzer (issue 17): every reader of af-io, and the config loader, fed
//! mutations of a seed corpus of valid inputs (`fixtures/fuzz`). The invariants: no panic, an
//! error (when there is one) whose message names the file, and bounded time.
//!
//! `fuzz_slice` is the fast deterministic slice that runs with the tests; `fuzz_long` is the
//! long loop `scripts/fuzz [SECONDS]` runs (ignored otherwise), with a fresh seed each time it is
//! not given one (`AF_FUZZ_SEED`). A failing input is written to `fuzz-failures/` under the
//! test's temporary directory, to be kept in `fixtures/fuzz/regressions` once fixed.

#[path = "fuzz/mutate.rs"]
mod mutate;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use af_core::config::{InputFormat, InputSpec};
use af_io::documents::read_input;
use af_io::features::{read_features, read_instances, InstanceFields};
use af_io::questions::{read_questions, QuestionFormat};
use mutate::{mutate, Rng};

/// One reader under test: its name, the seeds it starts from (in `fixtures/fuzz`), the file name
/// its input is written under, and how to call it.
struct Reader {
    name: &'static str,
    seeds: &'static [&'static str],
    file: &'static str,
    read: fn(&Path, u64) -> Result<(), String>,
}

fn spec(path: &Path, format: InputFormat) -> InputSpec {
    InputSpec::new(path, format)
}

fn questions(path: &Path, format: QuestionFormat, variant: u64) -> Result<(), String> {
    // Detected and named layouts, stopping at and skipping bad rows: all four must hold.
    let named = if variant & 1 == 0 { None } else { Some(format) };
    read_questions(path, named, variant & 2 != 0)
        .map(drop)
        .map_err(|e| e.to_string())
}

const READERS: &[Reader] = &[
    Reader {
        name: "activitynet",
        seeds: &["activitynet.json"],
        file: "captions.json",
        read: |p, _| {
            read_input(&spec(p, InputFormat::Activitynet))
                .map(drop)
                .map_err(|e| e.to_string())
        },
    },
    Reader {
        name: "documents-csv",
        seeds: &["documents.csv"],
        file: "captions.csv",
        read: |p, v| {
            let mut s = spec(p, InputFormat::Csv);
            s.group_field = Some("video".into());
            s.text_field = Some("caption".into());
            if v & 1 == 1 {
                s.delimiter = Some(',');
            }
            read_input(&s).map(drop).map_err(|e| e.to_string())
        },
    },
    Reader {
        name: "documents-jsonl",
        seeds: &["documents.jsonl"],
        file: "pairs.jsonl",
        read: |p, v| {
            let mut s = spec(p, InputFormat::Jsonl);
            s.group_field = Some("video".into());
            if v & 1 == 0 {
                s.context_field = Some("context".into());
                s.sentence2_field = Some("next".into());
                s.id_field = Some("id".into());
            } else {
                s.text_field = Some("context".into());
            }
            read_input(&s).map(drop).map_err(|e| e.to_string())
        },
    },
    Reader {
        name: "documents-text",
        seeds: &["documents.txt"],
        file: "prose.txt",
        read: |p, _| {
            read_input(&spec(p, InputFormat::Text))
                .map(drop)
                .map_err(|e| e.to_string())
        },
    },
    Reader {
        name: "conllu",
        seeds: &["treebank.conllu"],
        file: "treebank.conllu",
        read: |p, _| {
            af_io::conllu::read_conllu(p)
                .map(drop)
                .map_err(|e| e.to_string())
        },
    },
    Reader {
        name: "swag",
        seeds: &["swag.csv"],
        file: "swag.csv",
        read: |p, v| questions(p, QuestionFormat::Swag, v),
    },
    Reader {
        name: "swag-full",
        seeds: &["swag-full.csv"],
        file: "full.csv",
        read: |p, v| questions(p, QuestionFormat::SwagFull, v),
    },
    Reader {
        name: "hellaswag",
        seeds: &["hellaswag.jsonl"],
        file: "hs.jsonl",
        read: |p, v| questions(p, QuestionFormat::Hellaswag, v),
    },
    Reader {
        name: "winogrande",
        seeds: &["winogrande.jsonl"],
        file: "wg.jsonl",
        read: |p, v| questions(p, QuestionFormat::Winogrande, v),
    },
    Reader {
        name: "generic",
        seeds: &["generic.jsonl"],
        file: "mc.jsonl",
        read: |p, v| questions(p, QuestionFormat::Generic, v),
    },
    Reader {
        name: "af-dataset",
        seeds: &["af.jsonl"],
        file: "dataset.jsonl",
        read: |p, v| questions(p, QuestionFormat::Af, v),
    },
    Reader {
        name: "features-csv",
        seeds: &["features.csv"],
        file: "f.csv",
        read: |p, _| read_features(p).map(drop).map_err(|e| e.to_string()),
    },
    Reader {
        name: "features-npy",
        seeds: &["features.npy", "features-f8.npy"],
        file: "f.npy",
        read: |p, _| read_features(p).map(drop).map_err(|e| e.to_string()),
    },
    Reader {
        name: "aflite-instances",
        seeds: &["instances.jsonl"],
        file: "instances.jsonl",
        read: |p, v| {
            let fields = InstanceFields {
                id: "id".into(),
                label: "label".into(),
                group: (v & 1 == 1).then(|| "group".into()),
                twins_from_id: v & 2 != 0,
            };
            read_instances(p, &fields)
                .map(drop)
                .map_err(|e| e.to_string())
        },
    },
    Reader {
        name: "config",
        seeds: &["config.toml"],
        file: "config.toml",
        read: |p, _| {
            af_core::Config::load(p)
                .map(drop)
                .map_err(|e| e.to_string())
        },
    },
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fuzz")
}

fn seed_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap_or_else(|e| panic!("seed {name}: {e}"))
}

/// What one reader saw in a loop.
#[derive(Default)]
struct Tally {
    cases: u64,
    accepted: u64,
    slowest: Duration,
    slowest_bytes: usize,
}

/// Checks one input against the invariants; `Err` says which failed.
fn check(
    reader: &Reader,
    dir: &Path,
    input: &[u8],
    variant: u64,
    limit: Duration,
    tally: &mut Tally,
) -> Result<(), String> {
    let path = dir.join(reader.file);
    std::fs::write(&path, input).unwrap();
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| (reader.read)(&path, variant)));
    let took = start.elapsed();
    tally.cases += 1;
    if took > tally.slowest {
        tally.slowest = took;
        tally.slowest_bytes = input.len();
    }
    match result {
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            return Err(format!("panicked: {}", message.unwrap_or_default()));
        }
        Ok(Ok(())) => tally.accepted += 1,
        Ok(Err(message)) => {
            if !message.contains(&path.display().to_string()) {
                return Err(format!("the error does not name the file: {message}"));
            }
        }
    }
    if took > limit {
        return Err(format!(
            "took {took:?} for {} bytes (limit {limit:?})",
            input.len()
        ));
    }
    Ok(())
}

struct Failure {
    reader: &'static str,
    case: u64,
    kinds: Vec<&'static str>,
    what: String,
    saved: PathBuf,
}

/// Runs `cases_per_reader` cases per reader (or until `deadline`), from `seed`.
fn run_loop(
    seed: u64,
    cases_per_reader: Option<u64>,
    deadline: Option<Instant>,
    long: usize,
    limit: Duration,
) -> (Vec<(&'static str, Tally)>, Vec<Failure>) {
    let dir = tempfile::tempdir().unwrap();
    let failures_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    let all_seeds: Vec<Vec<u8>> = READERS
        .iter()
        .flat_map(|r| r.seeds.iter().map(|s| seed_bytes(s)))
        .collect();
    let mut tallies: Vec<(&'static str, Tally)> =
        READERS.iter().map(|r| (r.name, Tally::default())).collect();
    let mut failures = Vec::new();
    // A panic is caught and counted; its message would only repeat on stderr.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut case = 0u64;
    'outer: loop {
        for (r, reader) in READERS.iter().enumerate() {
            if cases_per_reader.is_some_and(|n| tallies[r].1.cases >= n)
                || deadline.is_some_and(|d| Instant::now() >= d)
            {
                break 'outer;
            }
            let mut rng =
                Rng::new(seed ^ (case.wrapping_mul(0x2545_F491_4F6C_DD1D)) ^ (r as u64) << 56);
            let base = seed_bytes(rng.pick::<&str>(reader.seeds));
            let other = &all_seeds[rng.below(all_seeds.len())];
            let (input, kinds) = mutate(&base, other, &mut rng, long);
            let variant = rng.next();
            if let Err(what) = check(
                reader,
                dir.path(),
                &input,
                variant,
                limit,
                &mut tallies[r].1,
            ) {
                std::fs::create_dir_all(&failures_dir).unwrap();
                let saved =
                    failures_dir.join(format!("{}-{seed}-{case}-{}", reader.name, reader.file));
                std::fs::write(&saved, &input).unwrap();
                failures.push(Failure {
                    reader: reader.name,
                    case,
                    kinds,
                    what,
                    saved,
                });
            }
        }
        case += 1;
    }
    std::panic::set_hook(hook);
    (tallies, failures)
}

fn report(failures: &[Failure], seed: u64) -> String {
    failures
        .iter()
        .take(20)
        .map(|f| {
            format!(
                "{} (seed {seed}, case {}, {:?}): {}\n  input kept in {}",
                f.reader,
                f.case,
                f.kinds,
                f.what,
                f.saved.display()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fast slice: a fixed seed, 120 cases per reader, inputs up to 64 KB.
#[test]
fn fuzz_slice() {
    let start = Instant::now();
    let (tallies, failures) = run_loop(17, Some(120), None, 64 << 10, Duration::from_secs(2));
    assert!(
        failures.is_empty(),
        "{} of the cases failed:\n{}",
        failures.len(),
        report(&failures, 17)
    );
    for (name, t) in &tallies {
        assert_eq!(t.cases, 120, "{name}");
        // Mutations that keep an input valid exist for every reader, and so do those that break it.
        assert!(
            t.accepted > 0 && t.accepted < t.cases,
            "{name}: {} of {} accepted",
            t.accepted,
            t.cases
        );
    }
    eprintln!(
        "fuzz slice: {} cases in {:.1?}",
        tallies.iter().map(|(_, t)| t.cases).sum::<u64>(),
        start.elapsed()
    );
}

/// The long loop: `AF_FUZZ_SECONDS` (default 60) over all readers, 1 MB lines, a random seed
/// unless `AF_FUZZ_SEED` names one. Prints the cases each reader saw.
#[test]
#[ignore = "the long fuzzing loop: scripts/fuzz [SECONDS]"]
fn fuzz_long() {
    let seconds: u64 = std::env::var("AF_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("AF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let (tallies, failures) = run_loop(
        seed,
        None,
        Some(Instant::now() + Duration::from_secs(seconds)),
        1 << 20,
        Duration::from_secs(10),
    );
    println!("fuzz: seed {seed}, {seconds} s");
    println!(
        "{:<18} {:>9} {:>9} {:>12}",
        "reader", "cases", "accepted", "slowest"
    );
    for (name, t) in &tallies {
        println!(
            "{name:<18} {:>9} {:>9} {:>9.1} ms ({} bytes)",
            t.cases,
            t.accepted,
            t.slowest.as_secs_f64() * 1e3,
            t.slowest_bytes
        );
    }
    println!(
        "total {} cases, {} failures",
        tallies.iter().map(|(_, t)| t.cases).sum::<u64>(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of the cases failed:\n{}",
        failures.len(),
        report(&failures, seed)
    );
}

/// Inputs the fuzzer once failed on, kept as `fixtures/fuzz/regressions/READER--what.EXT`:
/// each must now hold the invariants.
#[test]
fn fuzz_regressions_hold() {
    let dir = fixtures().join("regressions");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let reader_name = name.split("--").next().unwrap();
        let reader = READERS
            .iter()
            .find(|r| r.name == reader_name)
            .unwrap_or_else(|| panic!("{name}: no reader `{reader_name}`"));
        let input = std::fs::read(&path).unwrap();
        for variant in 0..4 {
            check(
                reader,
                tmp.path(),
                &input,
                variant,
                Duration::from_secs(5),
                &mut Tally::default(),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        seen += 1;
    }
    assert!(seen > 0 || !dir.exists());
}

/// Every seed is valid: the mutations start from inputs each reader accepts.
#[test]
fn every_seed_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    for reader in READERS {
        for seed in reader.seeds {
            let path = tmp.path().join(reader.file);
            std::fs::write(&path, seed_bytes(seed)).unwrap();
            for variant in 0..4 {
                (reader.read)(&path, variant)
                    .unwrap_or_else(|e| panic!("{}: seed {seed}: {e}", reader.name));
            }
        }
    }
}
