//! The LMs as the stages keep them: texts as token ids under an LM's vocabulary, the vocabulary
//! file and each fold's trained pair. The `lm` stage writes them; `generate` reads them.

use std::path::Path;

use af_core::{Item, LmConfig};
use af_text::{tokenize, Vocab};
use tch::{nn, Device};

use crate::lm::{BiLm, LmShape, BOS, EOS};
use crate::NnError;

/// Token ids of a text under `vocab`.
pub fn token_ids(vocab: &Vocab, text: &str) -> Vec<i64> {
    tokenize(text)
        .iter()
        .map(|w| i64::from(vocab.id(w)))
        .collect()
}

/// The forward training sequence of an item: `<bos>` context, second sentence `<eos>`.
pub fn item_sequence(vocab: &Vocab, item: &Item) -> Vec<i64> {
    let mut seq = vec![BOS];
    seq.extend(token_ids(vocab, &item.context));
    seq.extend(token_ids(vocab, &item.noun_phrase));
    seq.extend(token_ids(vocab, &item.ending));
    seq.push(EOS);
    seq
}

/// The shape of the LMs `[lm]` asks for over `vocab`.
pub fn shape(config: &LmConfig, vocab: &Vocab) -> LmShape {
    LmShape {
        vocab: vocab.len() as i64,
        embedding: config.embedding,
        hidden: config.hidden,
        layers: config.layers,
        dropout: config.dropout,
    }
}

/// The `vocab.tsv` of a stage directory (`pairs`: every token; `lm`: the LM's).
pub fn load_vocab(stage_dir: &Path) -> Result<Vocab, NnError> {
    let path = stage_dir.join("vocab.tsv");
    let bad = |message: String| NnError::Checkpoint {
        path: path.clone(),
        message,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    Vocab::from_tsv(&text).map_err(bad)
}

/// Loads the trained LM pair of `fold` from the `lm` stage's directory.
pub fn load_fold(
    config: &LmConfig,
    vocab: &Vocab,
    lm_dir: &Path,
    fold: u32,
    device: Device,
) -> Result<(nn::VarStore, BiLm), NnError> {
    let mut vs = nn::VarStore::new(device);
    let lm = BiLm::new(&vs.root(), shape(config, vocab));
    let path = lm_dir.join(format!("fold-{fold}/best.safetensors"));
    vs.load(&path).map_err(|e| NnError::Checkpoint {
        path: path.clone(),
        message: format!("cannot load the LM of fold {fold} ({e}); rerun `af run --force lm`"),
    })?;
    Ok((vs, lm))
}
