//! The generator stages end to end on the caption fixture with a tiny LM, through the `af` binary:
//! cross-fitting, sharding, resuming after a kill, and bad `--shard` arguments. LM pretraining is
//! tested in-process in crates/af-pipeline/tests/stages.rs.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use af_core::Candidate;
use common::*;

/// A config whose LM and generator are tiny; `block` items per pool part.
fn config(dir: &Path, block: usize) -> PathBuf {
    let captions = repo().join("fixtures/captions/captions.json");
    config_in(
        dir,
        &format!(
            "[lm]\nmin-count = 1\nembedding = 16\nhidden = 16\nbatch-size = 16\nmax-epochs = 2\nvalidation-share = 0.1\n\n\
             [generate]\nendings = 31\nmax-tokens = 12\nblock-items = {block}\nbatch-sequences = 100\n\n\
             [[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
            captions.display()
        ),
    )
}

fn pool(run: &Path) -> Vec<Candidate> {
    af_io::pool::parts(&run.join("generate/pool"))
        .unwrap()
        .iter()
        .flat_map(|p| af_io::pool::read_part(p).unwrap())
        .collect()
}

fn ok(o: std::process::Output) {
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A second run directory that shares the first one's items and LMs, without its pool.
fn copy_upstream(from: &Path, to: &Path, block: usize) -> PathBuf {
    let cfg = config(to, block);
    std::fs::create_dir_all(to.join("run")).unwrap();
    for stage in ["pairs", "lm"] {
        let status = Command::new("cp")
            .arg("-r")
            .arg(from.join("run").join(stage))
            .arg(to.join("run"))
            .status()
            .unwrap();
        assert!(status.success());
    }
    cfg
}

#[test]
fn generation_is_cross_fitted_shardable_and_resumable() {
    let a = tempfile::tempdir().unwrap();
    let cfg = config(a.path(), 8);
    ok(af(
        &["run", cfg.to_str().unwrap(), "--until", "generate"],
        a.path(),
    ));
    let reference = pool(&a.path().join("run"));
    let items = af_io::items::read_items(&a.path().join("run/pairs/items.jsonl")).unwrap();

    // Every item: the gold first, then up to 31 unique endings, none equal to the gold.
    for group in reference.chunk_by(|x, y| x.item_index == y.item_index) {
        assert!(group[0].is_gold());
        assert_eq!(group[0].ending, items[group[0].item_index as usize].ending);
        assert_eq!(group.len(), 32);
        let mut endings: Vec<&str> = group.iter().map(|c| c.ending.as_str()).collect();
        endings.sort_unstable();
        endings.dedup();
        assert_eq!(endings.len(), 32, "unique, and none is the gold");
        assert!(group[1..]
            .iter()
            .all(|c| c.tokens >= 1 && c.tokens <= 12 && !c.ending.contains("<unk>")));
    }
    assert_eq!(
        reference.iter().filter(|c| c.is_gold()).count(),
        items.len()
    );

    // Cross-fitting: each LM trained on every fold but its own, and the pool's gold features are
    // those of the LM of the item's fold.
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(a.path().join("run/lm/report.json")).unwrap(),
    )
    .unwrap();
    for f in report["folds"].as_array().unwrap() {
        let fold = f["fold"].as_u64().unwrap() as u32;
        let outside = items.iter().filter(|i| i.fold != fold).count() as u64;
        assert_eq!(
            f["train_items"].as_u64().unwrap() + f["validation_items"].as_u64().unwrap(),
            outside
        );
        assert_eq!(
            f["heldout_items"].as_u64().unwrap(),
            items.len() as u64 - outside
        );
    }
    check_features_come_from_the_heldout_lm(a.path(), &items, &reference);

    // Sharded into 3 (in another run directory), then merged by a plain run: the same pool.
    let b = tempfile::tempdir().unwrap();
    let cfg_b = copy_upstream(a.path(), b.path(), 8);
    for shard in ["0/3", "2/3"] {
        let o = af(
            &["generate", cfg_b.to_str().unwrap(), "--shard", shard],
            b.path(),
        );
        assert!(
            stdout(&o).contains("blocks of other shards are missing"),
            "{}",
            stdout(&o)
        );
        ok(o);
    }
    assert!(
        !b.path().join("run/generate/stage.json").exists(),
        "an incomplete pool is not marked done"
    );
    // The last shard finds every block done: it checks the pool and marks the stage done.
    ok(af(
        &["generate", cfg_b.to_str().unwrap(), "--shard", "1/3"],
        b.path(),
    ));
    assert!(b.path().join("run/generate/stage.json").exists());
    let report = |dir: &Path| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(dir.join("run/generate/report.json")).unwrap(),
        )
        .unwrap()
    };
    // Its time split covers its own blocks only.
    assert_eq!(
        report(b.path())["block_time"]["blocks"].as_u64().unwrap() as usize,
        (0..items.len().div_ceil(8)).filter(|b| b % 3 == 1).count()
    );
    assert_eq!(
        pool(&b.path().join("run")),
        reference,
        "sharded == unsharded"
    );

    // Killed midway, then resumed: the same pool, no item lost or doubled.
    let c = tempfile::tempdir().unwrap();
    let cfg_c = copy_upstream(a.path(), c.path(), 2);
    let mut child = Command::new(env!("CARGO_BIN_EXE_af"))
        .args(["generate", cfg_c.to_str().unwrap()])
        .current_dir(c.path())
        .env("AF_LOG", "warn")
        .spawn()
        .unwrap();
    let parts = c.path().join("run/generate/pool");
    let start = Instant::now();
    while af_io::pool::parts(&parts).map_or(0, |p| p.len()) < 3
        && start.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let done_before = af_io::pool::parts(&parts).unwrap().len();
    ok(af(&["generate", cfg_c.to_str().unwrap()], c.path()));
    let resumed = pool(&c.path().join("run"));
    let total_blocks = items.len().div_ceil(2);
    eprintln!("killed after {done_before} of {total_blocks} blocks");
    assert!(
        done_before >= 3 && done_before < total_blocks,
        "killed after {done_before} of {total_blocks} blocks"
    );
    // The resumed run's time split covers the blocks it wrote, and adds up.
    let time = &report(c.path())["block_time"];
    assert_eq!(
        time["blocks"].as_u64().unwrap() as usize,
        total_blocks - done_before
    );
    let (sampling, scoring) = (
        time["sources"]["sampled"].as_f64().unwrap(),
        time["scoring"].as_f64().unwrap(),
    );
    assert!(sampling > 0.0 && scoring > 0.0 && time["writing"].as_f64().unwrap() > 0.0);
    assert!(
        sampling + scoring <= time["seconds"].as_f64().unwrap(),
        "{time}"
    );
    let sampled = &report(c.path())["sampled"];
    assert!(
        sampled["draw_seconds"].as_f64().unwrap() <= sampling,
        "{sampled}"
    );
    assert!(sampled["draws"].as_u64().unwrap() > 0, "{sampled}");
    // Blocks of 2 items instead of 8 draw the same endings (randomness is per item); the
    // features are computed in other batches, which moves only their float rounding.
    assert_same_but_rounding(&resumed, &reference);
}

fn assert_same_but_rounding(a: &[Candidate], b: &[Candidate]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        let strip = |c: &Candidate| Candidate {
            features: [0.0; 8],
            ..c.clone()
        };
        assert_eq!(strip(x), strip(y));
        for (f, g) in x.features.iter().zip(&y.features) {
            assert!((f - g).abs() <= 1e-4 * g.abs().max(1.0), "{x:?} vs {y:?}");
        }
    }
}

/// Recomputes the gold ending's features of one item per fold with every fold's LM: only the LM
/// of the item's own fold (the one that never saw it) gives the pool's numbers.
fn check_features_come_from_the_heldout_lm(
    dir: &Path,
    items: &[af_core::Item],
    pool: &[Candidate],
) {
    use af_text::{tokenize, Vocab};
    let lm_dir = dir.join("run/lm");
    let vocab =
        Vocab::from_tsv(&std::fs::read_to_string(lm_dir.join("vocab.tsv")).unwrap()).unwrap();
    let shape = af_nn::lm::LmShape {
        vocab: vocab.len() as i64,
        embedding: 16,
        hidden: 16,
        layers: 1,
        dropout: 0.2,
    };
    let models: Vec<(tch::nn::VarStore, af_nn::lm::BiLm)> = (0..5)
        .map(|k| {
            let mut vs = tch::nn::VarStore::new(tch::Device::Cpu);
            let lm = af_nn::lm::BiLm::new(&vs.root(), shape);
            vs.load(lm_dir.join(format!("fold-{k}/best.safetensors")))
                .unwrap();
            (vs, lm)
        })
        .collect();
    let ids =
        |t: &str| -> Vec<i64> { tokenize(t).iter().map(|w| i64::from(vocab.id(w))).collect() };
    for fold in 0..5u32 {
        let gold = pool
            .iter()
            .find(|c| c.is_gold() && c.fold == fold)
            .expect("an item in every fold");
        let item = &items[gold.item_index as usize];
        let (s, n) = (ids(&item.context), ids(&item.noun_phrase));
        // A sampled ending of the same item too: its forward features come from the draw
        // (decision 474), its backward ones from the feature pass; both must be the fold's LM's.
        let sampled = pool
            .iter()
            .find(|c| {
                c.item_index == gold.item_index
                    && c.origin.as_deref() == Some("sampled")
                    && ids(&c.ending).len() == c.tokens as usize
            })
            .expect("a sampled ending whose text gives its ids back");
        for row in [gold, sampled] {
            let v = ids(&row.ending);
            for (k, (_, lm)) in models.iter().enumerate() {
                let f = af_nn::sample::features(
                    lm,
                    &[af_nn::sample::FeatureInput {
                        s: &s,
                        n: &n,
                        v: &v,
                    }],
                    8,
                    tch::Device::Cpu,
                )[0];
                let same = (0..8).all(|j| (f[j] - row.features[j]).abs() < 1e-4);
                assert_eq!(
                    same,
                    k as u32 == fold,
                    "fold {fold}, candidate {} scored by LM {k}: {f:?} vs pool {:?}",
                    row.candidate,
                    row.features
                );
            }
        }
    }
}

#[test]
fn bad_shard_arguments_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let o = af(&["generate", "x.toml", "--shard", "3/3"], d.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("need 0 <= I < N"), "{}", stderr(&o));
}
