//! Batched ancestral sampling of endings, and the LM features of any ending (docs/design.md §1.2).
//!
//! Sampling draws each token by inverse CDF from one uniform number per sequence and step,
//! which the caller supplies from per-item seeds: the randomness of an item does not depend on
//! which other items share its batch, and the whole loop stays on the device (one copy of the
//! sampled tokens and one of their log-probabilities to the host per batch, none per token).

use rayon::prelude::*;
use tch::{Device, Kind, Tensor};

use crate::lm::{pad_batch, BiLm, BOS, EOS, PAD, UNK};

/// One context to sample for: `prefix` is `<bos>` + context + noun phrase; `uniforms` holds
/// `count * max_tokens` numbers in [0, 1).
pub struct SampleJob<'a> {
    pub prefix: &'a [i64],
    pub count: usize,
    pub uniforms: &'a [f32],
}

#[derive(Clone, Debug)]
pub struct SampleSettings {
    pub max_tokens: usize,
    pub temperature: f64,
    /// Draw among the `top_k` most likely tokens only (0: all).
    pub top_k: usize,
    /// Draw from the nucleus: the fewest most likely tokens whose probability reaches `top_p`
    /// (1: all). Applied after `top_k`, on the distribution over the temperature.
    pub top_p: f64,
    /// Locally typical sampling: draw among the tokens whose surprisal is nearest the
    /// distribution's entropy, fewest first, until their probability reaches `typical_p` (1: all).
    /// Applied after `top_p`; see [`typical_set`].
    pub typical_p: f64,
    /// Token ids that end an ending (and are kept in it): `.`, `!`, `?`.
    pub stop: Vec<i64>,
    pub device: Device,
}

/// One drawn ending: its tokens, and the forward LM's log-probability of each given the prefix
/// and the tokens before it, under the model's own distribution (no temperature, bans or
/// truncation): what [`items_features`] computes for these tokens, read from the sampling pass's
/// logits instead of a second pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Drawn {
    pub tokens: Vec<i64>,
    pub logprobs: Vec<f32>,
}

/// Samples `count` endings for every job. An ending ends with its first stop token (kept) or at
/// `max_tokens`; `<pad>`, `<unk>` and `<bos>` are never drawn, nor `<eos>` or a stop token as the
/// first token (an empty ending). Returns per job its endings, in draw order.
pub fn sample(lm: &BiLm, jobs: &[SampleJob], s: &SampleSettings) -> Vec<Vec<Drawn>> {
    // On the CPU, a row whose ending is over leaves the batch: a step costs in proportion to the
    // rows still drawing, and most endings stop long before `max_tokens`. On a GPU every row
    // stays: its steps are latency-bound, and the loop stays free of host syncs.
    sample_dropping_finished(lm, jobs, s, !s.device.is_cuda())
}

/// [`sample`], with finished rows leaving the batch or not: the endings are the same.
fn sample_dropping_finished(
    lm: &BiLm,
    jobs: &[SampleJob],
    s: &SampleSettings,
    compact: bool,
) -> Vec<Vec<Drawn>> {
    let _guard = tch::no_grad_guard();
    let total: usize = jobs.iter().map(|j| j.count).sum();
    if total == 0 {
        return jobs.iter().map(|_| Vec::new()).collect();
    }
    let dev = s.device;
    let prefixes: Vec<&[i64]> = jobs.iter().map(|j| j.prefix).collect();
    let lengths = Tensor::from_slice(
        &jobs
            .iter()
            .map(|j| j.prefix.len() as i64)
            .collect::<Vec<_>>(),
    );
    let (state, top) = lm.encode_prefixes(&lm.forward, &pad_batch(&prefixes, dev), &lengths);
    let t_max = s.max_tokens;
    // The uniforms of the rows still drawing, compacted with them.
    let (rows, mut uniforms) = expand_jobs(
        &jobs
            .iter()
            .map(|j| (j.count, j.uniforms))
            .collect::<Vec<_>>(),
        t_max,
        dev,
    );
    let tch::nn::LSTMState((h, c)) = &state;
    let mut state = tch::nn::LSTMState((h.index_select(1, &rows), c.index_select(1, &rows)));
    let mut top = top.index_select(0, &rows);

    let vocab = lm.shape.vocab;
    let bans = Bans::new(vocab, &s.stop, dev);
    // Which tokens end an ending: `<eos>` and the stop tokens.
    let mut ends = Tensor::zeros([vocab], (Kind::Bool, dev));
    let _ = ends.index_fill_(0, &bans.not_first, 1);

    let drawn = Tensor::full([total as i64, t_max as i64], EOS, (Kind::Int64, dev));
    let logprobs = Tensor::zeros([total as i64, t_max as i64], (Kind::Float, dev));
    let mut alive = Tensor::arange(total as i64, (Kind::Int64, dev));
    for t in 0..t_max {
        let logits = lm.logits(&lm.forward, &top).to_kind(Kind::Float);
        // The feature pass's log-probabilities, from logits this step has anyway: one fused
        // log-softmax over the vocabulary (cheaper than a log-sum-exp's separate passes), not a
        // second LM pass over every ending. Taken before the bans change the logits in place.
        let log_probs = logits.log_softmax(1, Kind::Float);
        let mut token = draw(
            bans.apply(logits, s.temperature, t == 0),
            s.top_k,
            s.top_p,
            s.typical_p,
            &uniforms.narrow(1, t as i64, 1),
        );
        let picked = log_probs.gather(1, &token.unsqueeze(1), false);
        let _ = drawn
            .narrow(1, t as i64, 1)
            .index_copy_(0, &alive, &token.unsqueeze(1));
        let _ = logprobs
            .narrow(1, t as i64, 1)
            .index_copy_(0, &alive, &picked);
        if t + 1 == t_max {
            break;
        }
        if compact {
            let going = ends
                .index_select(0, &token)
                .logical_not()
                .nonzero()
                .squeeze_dim(1);
            if going.size()[0] == 0 {
                break;
            }
            if going.size()[0] < alive.size()[0] {
                alive = alive.index_select(0, &going);
                uniforms = uniforms.index_select(0, &going);
                token = token.index_select(0, &going);
                let tch::nn::LSTMState((h, c)) = &state;
                state = tch::nn::LSTMState((h.index_select(1, &going), c.index_select(1, &going)));
            }
        }
        state = lm.step(&lm.forward, &token, &state);
        top = state.h().select(0, lm.shape.layers - 1);
    }
    // One host copy of each for the whole batch.
    let flat: Vec<i64> =
        Vec::<i64>::try_from(drawn.to_device(Device::Cpu).flatten(0, -1)).expect("int64 tokens");
    let flat_lp: Vec<f32> = Vec::<f32>::try_from(logprobs.to_device(Device::Cpu).flatten(0, -1))
        .expect("f32 log-probabilities");

    let mut out: Vec<Vec<Drawn>> = jobs.iter().map(|j| Vec::with_capacity(j.count)).collect();
    let mut row = 0;
    for (j, job) in jobs.iter().enumerate() {
        for _ in 0..job.count {
            let seq = &flat[row * t_max..(row + 1) * t_max];
            let mut tokens = Vec::with_capacity(t_max);
            for &tok in seq {
                if tok == EOS {
                    break;
                }
                tokens.push(tok);
                if s.stop.contains(&tok) {
                    break;
                }
            }
            let logprobs = flat_lp[row * t_max..row * t_max + tokens.len()].to_vec();
            out[j].push(Drawn { tokens, logprobs });
            row += 1;
        }
    }
    out
}

/// A batch of sampling jobs as rows: which job each row draws for ([R] int64, job by job, each
/// repeated `count` times, for `index_select` on per-job state) and the rows' uniforms [R, t_max],
/// from each job's `(count, uniforms)` (`count * t_max` numbers).
pub(crate) fn expand_jobs(
    jobs: &[(usize, &[f32])],
    t_max: usize,
    device: Device,
) -> (Tensor, Tensor) {
    let total: usize = jobs.iter().map(|(count, _)| count).sum();
    let rows: Vec<i64> = jobs
        .iter()
        .enumerate()
        .flat_map(|(j, (count, _))| std::iter::repeat_n(j as i64, *count))
        .collect();
    let mut uniforms = Vec::with_capacity(total * t_max);
    for (count, u) in jobs {
        assert_eq!(u.len(), count * t_max, "one uniform per sequence and step");
        uniforms.extend_from_slice(u);
    }
    (
        Tensor::from_slice(&rows).to_device(device),
        Tensor::from_slice(&uniforms)
            .view([total as i64, t_max as i64])
            .to_device(device),
    )
}

/// One token per row from next-token `logits` (over the temperature, banned tokens at -inf),
/// truncated to top-k, the nucleus and the typical set, by inverse CDF at each row's uniform
/// number.
/// # Shapes
/// `logits`: [B, V], `uniforms`: [B, 1] -> [B]
pub(crate) fn draw(
    logits: Tensor,
    top_k: usize,
    top_p: f64,
    typical_p: f64,
    uniforms: &Tensor,
) -> Tensor {
    let vocab = logits.size()[1];
    let cdf = truncate(logits, top_k, top_p, typical_p)
        .softmax(-1, Kind::Float)
        .cumsum(1, Kind::Float);
    let target = uniforms * cdf.narrow(1, vocab - 1, 1);
    // "right": the first token whose cumulative probability exceeds the target, so a token of
    // probability zero (banned) is never chosen, even for a uniform of exactly 0.
    target
        .searchsorted(&cdf, false, true, "right", None::<Tensor>)
        .clamp_max(vocab - 1)
        .squeeze_dim(1)
}

/// Top-k, then nucleus (top-p), then typical-set truncation of next-token logits: the tokens
/// outside are set to -inf. Ties with the k-th logit are kept; the most likely token always
/// survives top-k and the nucleus, and some token always survives the typical set.
/// # Shapes
/// [B, V] -> [B, V]
fn truncate(logits: Tensor, top_k: usize, top_p: f64, typical_p: f64) -> Tensor {
    let mut logits = logits;
    let vocab = logits.size()[1];
    if top_k > 0 && (top_k as i64) < vocab {
        let (values, _) = logits.topk(top_k as i64, 1, true, true);
        let kth = values.narrow(1, top_k as i64 - 1, 1);
        logits = logits.masked_fill(&logits.lt_tensor(&kth), f64::NEG_INFINITY);
    }
    if top_p < 1.0 {
        logits = if logits.device() == Device::Cpu {
            nucleus_on_host(logits, top_p)
        } else {
            // A GPU sorting the whole vocabulary per step made nucleus sampling 7x slower than
            // plain sampling on an H200 (docs/benchmarks.md).
            nucleus_among_top(logits, top_p, NUCLEUS_CANDIDATES)
        };
    }
    if typical_p < 1.0 {
        logits = typical_set(logits, typical_p);
    }
    logits
}

/// Locally typical sampling's truncation (Meister et al., TACL 2023; Hugging Face's
/// `typical_p`): order each row's tokens by how far their surprisal lies from the row's entropy,
/// and keep the nearest until their probability reaches `typical_p` (a token is outside when
/// those before it already reach it). A person's text carries about the entropy's information
/// per token; the nucleus keeps the likeliest tokens, so its draws are more likely to the LM than
/// a person's sentence. (On SmolLM2 at 0.95 the set is the nucleus's all the same: the tail past
/// twice the entropy holds more than 5% of the mass; docs/decisions/484-typical-sampling.md.)
/// Sorts the whole vocabulary, stably, so ties keep the vocabulary's order.
/// # Shapes
/// [B, V] -> [B, V]
fn typical_set(logits: Tensor, typical_p: f64) -> Tensor {
    let log_probs = logits.log_softmax(-1, Kind::Float);
    let probs = log_probs.exp();
    // A banned token has probability 0 and log-probability -inf: its share of the entropy is 0.
    let entropy = (&probs * &log_probs)
        .nan_to_num(0.0, None::<f64>, None::<f64>)
        .sum_dim_intlist(-1, true, Kind::Float)
        .neg();
    let distance = (log_probs.neg() - entropy).abs();
    let (_, order) = distance.sort_stable(true, -1, false);
    let ordered = probs.gather(-1, &order, false);
    keep_until_mass(logits, &ordered, &order, typical_p)
}

/// Keeps each row's tokens in `order` until the probability of those before a token reaches
/// `mass` (that token and the rest are set to -inf): the nucleus's rule and the typical set's,
/// over their own orders. `ordered` holds the probabilities in that order.
/// # Shapes
/// `logits`, `ordered`, `order`: [B, V] -> [B, V]
fn keep_until_mass(logits: Tensor, ordered: &Tensor, order: &Tensor, mass: f64) -> Tensor {
    let outside_ordered = (ordered.cumsum(-1, Kind::Float) - ordered)
        .ge(mass)
        .to_kind(Kind::Float);
    let outside = outside_ordered
        .zeros_like()
        .scatter(-1, order, &outside_ordered)
        .gt(0.5);
    logits.masked_fill(&outside, f64::NEG_INFINITY)
}

/// The nucleus without ordering the vocabulary (decision 475), for logits on the CPU: a trained
/// LM's nuclei hold a median of 1,500 of 6,000 tokens, too many for [`nucleus_among_top`]'s
/// candidates, and the sort it falls back to was most of a sampling step. Each row's
/// probabilities are summed into buckets by their bit pattern (monotone in the value), which
/// finds the bucket where the mass reaches `top_p`; only that bucket's few tokens are sorted.
/// The kept tokens are those at or above the last one the nucleus needs, which is
/// [`nucleus_by_sort`]'s set but for two roundings: the mass is summed in f64 here (in f32
/// there), and a token tied with the last one is kept here (the sort's order decides there).
/// # Shapes
/// [B, V] -> [B, V]
fn nucleus_on_host(logits: Tensor, top_p: f64) -> Tensor {
    let (rows, vocab) = logits.size2().expect("[B, V] logits");
    if rows == 0 {
        return logits;
    }
    let logits = logits.to_kind(Kind::Float).contiguous();
    let probs = logits.softmax(-1, Kind::Float);
    let mut out = Tensor::empty([rows, vocab], (Kind::Float, Device::Cpu));
    // Torch compares an f32 tensor with a scalar in f32: so does this, as the sort does.
    let top_p = top_p as f32 as f64;
    // SAFETY: `logits` and `probs` are only read, `out` is new (no other tensor shares its
    // storage), and no torch operation runs while the slices live.
    let (logits_in, probs_in, kept) =
        unsafe { (host_f32(&logits), host_f32(&probs), host_f32_mut(&mut out)) };
    kept.par_chunks_mut(vocab as usize)
        .zip(logits_in.par_chunks(vocab as usize))
        .zip(probs_in.par_chunks(vocab as usize))
        .for_each(|((kept, logits), probs)| {
            let floor = nucleus_floor(probs, top_p);
            for ((k, &l), &p) in kept.iter_mut().zip(logits).zip(probs) {
                *k = if p < floor { f32::NEG_INFINITY } else { l };
            }
        });
    out
}

/// The elements of a contiguous f32 tensor on the CPU, without a copy.
/// # Safety
/// Nothing may write to the tensor's storage while the slice lives.
unsafe fn host_f32(t: &Tensor) -> &[f32] {
    assert!(t.kind() == Kind::Float && t.device() == Device::Cpu && t.is_contiguous());
    std::slice::from_raw_parts(t.data_ptr() as *const f32, t.numel())
}

/// [`host_f32`], to write.
/// # Safety
/// Nothing else may read or write the tensor's storage while the slice lives.
unsafe fn host_f32_mut(t: &mut Tensor) -> &mut [f32] {
    assert!(t.kind() == Kind::Float && t.device() == Device::Cpu && t.is_contiguous());
    std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, t.numel())
}

/// The probability of the least likely token of a row's nucleus: walking the tokens from the
/// most likely, the last one before whose turn the mass already taken is still below `top_p`.
fn nucleus_floor(probs: &[f32], top_p: f64) -> f32 {
    // A probability's bit pattern orders it, and is at most 0x3F80_0000 (1.0). First the row in
    // 4 buckets per octave (at most 509), then the bucket where the mass reaches `top_p` in 256
    // by the next 8 bits: what is left to sort is a few tokens, not the hundreds of a trained
    // LM's crowded tail.
    // (A NaN, from an LM gone wrong, lands in the last bucket and keeps the row whole.)
    let coarse = |p: f32| ((p.to_bits() >> 21) as usize).min(511);
    let fine = |p: f32| ((p.to_bits() >> 13) & 0xFF) as usize;
    let mut before = 0.0;
    let Some(edge) = bucket_reaching(probs, coarse, top_p, &mut before) else {
        // The row's summed probabilities fall short of `top_p` by rounding: every token is in.
        return 0.0;
    };
    let in_edge: Vec<f32> = probs
        .iter()
        .copied()
        .filter(|&p| coarse(p) == edge)
        .collect();
    let Some(edge) = bucket_reaching(&in_edge, fine, top_p, &mut before) else {
        // Summed in another order, the bucket fell short of `top_p` by rounding: all of it is in.
        return in_edge.into_iter().fold(f32::INFINITY, f32::min);
    };
    let mut last: Vec<f32> = in_edge.into_iter().filter(|&p| fine(p) == edge).collect();
    last.sort_unstable_by(|a, b| b.total_cmp(a));
    let mut floor = last[0];
    for p in last {
        if before >= top_p {
            break;
        }
        floor = p;
        before += f64::from(p);
    }
    floor
}

/// Of `values` summed into buckets by `bucket` (under 512, higher for larger values), the highest
/// bucket with which the mass taken reaches `top_p`, starting from `before` and adding to it the
/// mass of the buckets above that one. `None` if all of it stays below `top_p`.
fn bucket_reaching(
    values: &[f32],
    bucket: impl Fn(f32) -> usize,
    top_p: f64,
    before: &mut f64,
) -> Option<usize> {
    let mut mass = [0f64; 512];
    for &p in values {
        mass[bucket(p)] += f64::from(p);
    }
    for b in (0..mass.len()).rev() {
        if *before + mass[b] >= top_p {
            return Some(b);
        }
        *before += mass[b];
    }
    None
}

/// How many of each row's most likely tokens the nucleus is looked for among first.
const NUCLEUS_CANDIDATES: i64 = 512;

/// The nucleus: the fewest most likely tokens whose probability reaches `top_p` (a token is
/// outside when the tokens before it in rank already reach `top_p`), found by sorting each row's
/// whole vocabulary.
/// # Shapes
/// [B, V] -> [B, V]
fn nucleus_by_sort(logits: Tensor, top_p: f64) -> Tensor {
    let (sorted, order) = logits.sort(1, true);
    let probs = sorted.softmax(-1, Kind::Float);
    keep_until_mass(logits, &probs, &order, top_p)
}

/// The same nucleus, found among each row's `candidates` most likely tokens: sorting the whole
/// vocabulary was most of a CPU sampling step (2.0 s of about 3 for 4,096 rows x 5,950 tokens on
/// two cores; the top 512 take 0.35 s). A row whose top `candidates` hold less than `top_p` of
/// its mass is sorted whole, so the result is [`nucleus_by_sort`]'s.
/// # Shapes
/// [B, V] -> [B, V]
fn nucleus_among_top(logits: Tensor, top_p: f64, candidates: i64) -> Tensor {
    if candidates >= logits.size()[1] {
        return nucleus_by_sort(logits, top_p);
    }
    let (values, order) = logits.topk(candidates, 1, true, true);
    let probs = (values - logits.logsumexp([1], true)).exp();
    let reached = probs.cumsum(1, Kind::Float);
    let inside = (&reached - &probs).lt(top_p).to_kind(Kind::Float);
    let kept = logits.zeros_like().scatter(1, &order, &inside).gt(0.5);
    let mut out = logits.masked_fill(&kept.logical_not(), f64::NEG_INFINITY);
    let short = reached
        .narrow(1, candidates - 1, 1)
        .squeeze_dim(1)
        .lt(top_p)
        .nonzero()
        .squeeze_dim(1);
    if short.size()[0] > 0 {
        out = out.index_copy(
            0,
            &short,
            &nucleus_by_sort(logits.index_select(0, &short), top_p),
        );
    }
    out
}

/// The tokens sampling never draws (`<pad>`, `<unk>`, `<bos>`), and those it never draws first
/// (`<eos>` and the stop tokens: an empty ending).
struct Bans {
    never: Tensor,
    not_first: Tensor,
}

impl Bans {
    fn new(vocab: i64, stop: &[i64], device: Device) -> Self {
        let never: Vec<i64> = [PAD, UNK, BOS].into_iter().filter(|&t| t < vocab).collect();
        let not_first: Vec<i64> = stop
            .iter()
            .copied()
            .chain([EOS])
            .filter(|&t| t < vocab)
            .collect();
        Self {
            never: Tensor::from_slice(&never).to_device(device),
            not_first: Tensor::from_slice(&not_first).to_device(device),
        }
    }

    /// Next-token logits (fp32) over the temperature, with the banned tokens at -inf: at
    /// temperature 1 the logits given, changed in place.
    /// # Shapes
    /// [B, V] -> [B, V]
    fn apply(&self, logits: Tensor, temperature: f64, first: bool) -> Tensor {
        // At temperature 1 the division would copy the logits to change nothing.
        let mut logits = if temperature == 1.0 {
            logits
        } else {
            logits / temperature
        };
        let _ = logits.index_fill_(1, &self.never, f64::NEG_INFINITY);
        if first {
            let _ = logits.index_fill_(1, &self.not_first, f64::NEG_INFINITY);
        }
        logits
    }
}

/// The LM features of an ending, in the order of [`af_core::LM_FEATURES`].
/// One ending to score in its context (ids without `<bos>`/`<eos>`).
pub struct FeatureInput<'a> {
    pub s: &'a [i64],
    pub n: &'a [i64],
    pub v: &'a [i64],
}

/// Mean negative log-likelihood of a run of token log-probabilities (0 for none).
fn mean_nll(r: &[f32]) -> f32 {
    if r.is_empty() {
        0.0
    } else {
        -r.iter().sum::<f32>() / r.len() as f32
    }
}

/// The backward model's sequence for an ending in its context: `<bos> rev(v) rev(n) rev(s)`.
fn backward_sequence(s: &[i64], n: &[i64], v: &[i64]) -> Vec<i64> {
    let mut seq = Vec::with_capacity(1 + s.len() + n.len() + v.len());
    seq.push(BOS);
    seq.extend(v.iter().rev());
    seq.extend(n.iter().rev());
    seq.extend(s.iter().rev());
    seq
}

/// Next-token log-probabilities of padded sequences under one direction, on the host, row-major,
/// with the row width.
fn logprob_rows(
    lm: &BiLm,
    dir: &crate::lm::Direction,
    seqs: &[Vec<i64>],
    device: Device,
) -> (Vec<f32>, usize) {
    let refs: Vec<&[i64]> = seqs.iter().map(Vec::as_slice).collect();
    let lp = lm
        .token_logprobs(dir, &pad_batch(&refs, device), false)
        .to_device(Device::Cpu);
    let width = lp.size()[1] as usize;
    (
        Vec::<f32>::try_from(lp.flatten(0, -1)).expect("f32 log-probabilities"),
        width,
    )
}

/// The features of [`af_core::LM_FEATURES`] for every input, batched by `batch` sequences: a forward pass
/// over `<bos> s n v` and a backward pass over `<bos> rev(v) rev(n) rev(s)`. Log-perplexities are
/// mean negative log-likelihoods per token (natural log).
pub fn features(lm: &BiLm, inputs: &[FeatureInput], batch: usize, device: Device) -> Vec<[f32; 8]> {
    let _guard = tch::no_grad_guard();
    let mut out = Vec::with_capacity(inputs.len());
    for chunk in inputs.chunks(batch.max(1)) {
        let fwd: Vec<Vec<i64>> = chunk
            .iter()
            .map(|x| [&[BOS][..], x.s, x.n, x.v].concat())
            .collect();
        let bwd: Vec<Vec<i64>> = chunk
            .iter()
            .map(|x| backward_sequence(x.s, x.n, x.v))
            .collect();
        let (f, fw) = logprob_rows(lm, &lm.forward, &fwd, device);
        let (b, bw) = logprob_rows(lm, &lm.backward, &bwd, device);
        for (i, x) in chunk.iter().enumerate() {
            let (ls, ln, lv) = (x.s.len(), x.n.len(), x.v.len());
            let frow = &f[i * fw..(i + 1) * fw];
            let brow = &b[i * bw..(i + 1) * bw];
            out.push([
                mean_nll(&frow[ls + ln..ls + ln + lv]),
                mean_nll(&brow[..lv]),
                mean_nll(&brow[lv..lv + ln + ls]),
                mean_nll(&frow[..ls]),
                if lv > 0 { frow[ls + ln + lv - 1] } else { 0.0 },
                lv as f32,
                ln as f32,
                ls as f32,
            ]);
        }
    }
    out
}

/// One item's endings to score with [`items_features`]: context `s`, noun phrase `n`.
pub struct ItemEndings<'a> {
    pub s: &'a [i64],
    pub n: &'a [i64],
    pub endings: Vec<EndingToScore<'a>>,
}

/// An ending's ids and, when this LM drew it after the same prefix, the log-probabilities it
/// drew them with ([`Drawn::logprobs`]): the forward pass is then not run for it.
#[derive(Clone, Copy, Debug)]
pub struct EndingToScore<'a> {
    pub ids: &'a [i64],
    pub forward: Option<&'a [f32]>,
}

impl<'a> From<&'a [i64]> for EndingToScore<'a> {
    fn from(ids: &'a [i64]) -> Self {
        Self { ids, forward: None }
    }
}

impl<'a> From<&'a Drawn> for EndingToScore<'a> {
    fn from(d: &'a Drawn) -> Self {
        Self {
            ids: &d.tokens,
            forward: Some(&d.logprobs),
        }
    }
}

/// The forward LM's log-probability of each token of `ids` (ending `k` after the prefix of item
/// `rows[k]`, whose last output and LSTM state are `prefix`'s rows), on the host, row-major, with
/// the row width (the longest ending).
fn ending_logprobs_after_prefix(
    lm: &BiLm,
    prefix: (&Tensor, &Tensor, &Tensor),
    rows: &[i64],
    ids: &[&[i64]],
    device: Device,
) -> (Vec<f32>, usize) {
    let (top, h, c) = prefix;
    let rows = Tensor::from_slice(rows).to_device(device);
    let v = pad_batch(ids, device);
    let lv = v.size()[1];
    // Outputs that predict v[0], v[1], ...: the prefix's last output, then one per ending token.
    let first = top.index_select(0, &rows).unsqueeze(1);
    let outputs = if lv > 1 {
        let expanded = tch::nn::LSTMState((h.index_select(1, &rows), c.index_select(1, &rows)));
        let (rest, _) = tch::nn::RNN::seq_init(
            &lm.forward.lstm,
            &lm.embed(&v.narrow(1, 0, lv - 1), false),
            &expanded,
        );
        // Under autocast the LSTM's outputs may be fp16 and the prefix's fp32.
        Tensor::cat(&[first.to_kind(rest.kind()), rest], 1)
    } else {
        first
    };
    let lp = lm
        .logits(&lm.forward, &outputs)
        .log_softmax(-1, Kind::Float)
        .gather(2, &v.unsqueeze(2), false)
        .squeeze_dim(2);
    (
        Vec::<f32>::try_from(lp.to_device(Device::Cpu).flatten(0, -1))
            .expect("f32 log-probabilities"),
        lv as usize,
    )
}

/// The same features as [`features`] for many endings of several contexts, faster:
/// - the forward pass over `<bos> s n` runs once per item, and its state is shared by the item's
///   endings, so the forward model reads only the endings' tokens, and not even those of an
///   ending whose log-probabilities the sampler gave ([`EndingToScore::forward`]);
/// - the endings of all items are scored together, shortest backward sequence first, in batches of
///   `batch` rows within `logit_budget` logit elements ([`crate::lm::logit_budget`], or a memory
///   plan's) (the GPU sees large batches of similar lengths, not one item's at a time).
///
/// Returns per item its endings' features, in order.
pub fn items_features(
    lm: &BiLm,
    items: &[ItemEndings],
    batch: usize,
    logit_budget: usize,
    device: Device,
) -> Vec<Vec<[f32; 8]>> {
    let _guard = tch::no_grad_guard();
    let mut out: Vec<Vec<[f32; 8]>> = items
        .iter()
        .map(|it| vec![[0f32; 8]; it.endings.len()])
        .collect();
    if items.iter().all(|it| it.endings.is_empty()) {
        return out;
    }
    // The prefixes `<bos> s n`: their log-probabilities (for the log-perplexity of s) and their
    // final states, one padded batch.
    let prefixes: Vec<Vec<i64>> = items
        .iter()
        .map(|it| [&[BOS][..], it.s, it.n].concat())
        .collect();
    let refs: Vec<&[i64]> = prefixes.iter().map(Vec::as_slice).collect();
    let padded = pad_batch(&refs, device);
    let (prefix_lp, pw) = {
        let lp = lm
            .token_logprobs(&lm.forward, &padded, false)
            .to_device(Device::Cpu);
        let width = lp.size()[1] as usize;
        (
            Vec::<f32>::try_from(lp.flatten(0, -1)).expect("f32 log-probabilities"),
            width,
        )
    };
    let fwd_s: Vec<f32> = items
        .iter()
        .enumerate()
        .map(|(i, it)| mean_nll(&prefix_lp[i * pw..i * pw + it.s.len()]))
        .collect();
    let lengths = Tensor::from_slice(&prefixes.iter().map(|p| p.len() as i64).collect::<Vec<_>>());
    let (state, top) = lm.encode_prefixes(&lm.forward, &padded, &lengths);
    let tch::nn::LSTMState((h, c)) = &state;

    let backward_len = |&(i, e): &(usize, usize)| {
        items[i].s.len() + items[i].n.len() + items[i].endings[e].ids.len() + 1
    };
    let mut order: Vec<(usize, usize)> = items
        .iter()
        .enumerate()
        .flat_map(|(i, it)| (0..it.endings.len()).map(move |e| (i, e)))
        .collect();
    order.sort_by_key(|x| (backward_len(x), x.0, x.1));
    // Batches of similar lengths, at most `batch` sequences and a device-sized budget of logits
    // (the backward pass's are the largest).
    let chunks =
        crate::lm::budgeted_batches(&order, backward_len, batch, lm.shape.vocab, logit_budget);
    for chunk in chunks {
        let endings: Vec<EndingToScore> = chunk.iter().map(|&(i, e)| items[i].endings[e]).collect();
        // The forward pass for the endings the sampler did not score, in chunk order.
        let unscored: Vec<usize> = (0..chunk.len())
            .filter(|&r| endings[r].forward.is_none())
            .collect();
        let (lp, lv) = if unscored.is_empty() {
            (Vec::new(), 0)
        } else {
            let rows: Vec<i64> = unscored.iter().map(|&r| chunk[r].0 as i64).collect();
            let ids: Vec<&[i64]> = unscored.iter().map(|&r| endings[r].ids).collect();
            ending_logprobs_after_prefix(lm, (&top, h, c), &rows, &ids, device)
        };
        // The k-th ending without log-probabilities is row k of `lp`.
        let mut computed = 0;
        let bwd: Vec<Vec<i64>> = chunk
            .iter()
            .map(|&(i, e)| backward_sequence(items[i].s, items[i].n, items[i].endings[e].ids))
            .collect();
        let (blp, bw) = logprob_rows(lm, &lm.backward, &bwd, device);
        for (r, &(i, e)) in chunk.iter().enumerate() {
            let (ls, ln, nv) = (items[i].s.len(), items[i].n.len(), endings[r].ids.len());
            let frow = match endings[r].forward {
                Some(given) => {
                    assert_eq!(given.len(), nv, "one log-probability per ending token");
                    given
                }
                None => {
                    let k = computed;
                    computed += 1;
                    &lp[k * lv..k * lv + nv]
                }
            };
            let brow = &blp[r * bw..(r + 1) * bw];
            out[i][e] = [
                mean_nll(frow),
                mean_nll(&brow[..nv]),
                mean_nll(&brow[nv..nv + ln + ls]),
                fwd_s[i],
                frow.last().copied().unwrap_or(0.0),
                nv as f32,
                ln as f32,
                ls as f32,
            ];
        }
    }
    out
}

/// Each prefix's distribution of the first sampled token (banned tokens removed, as in
/// [`sample`]), on the host: for checking reduced precision against fp32.
pub fn first_token_distribution(
    lm: &BiLm,
    prefixes: &[&[i64]],
    s: &SampleSettings,
) -> Vec<Vec<f32>> {
    let _guard = tch::no_grad_guard();
    let lengths = Tensor::from_slice(&prefixes.iter().map(|p| p.len() as i64).collect::<Vec<_>>());
    let (_, top) = lm.encode_prefixes(&lm.forward, &pad_batch(prefixes, s.device), &lengths);
    let vocab = lm.shape.vocab;
    let logits = Bans::new(vocab, &s.stop, s.device).apply(
        lm.logits(&lm.forward, &top).to_kind(Kind::Float),
        s.temperature,
        true,
    );
    let p = truncate(logits, s.top_k, s.top_p, s.typical_p)
        .softmax(-1, Kind::Float)
        .to_device(Device::Cpu);
    let flat = Vec::<f32>::try_from(p.flatten(0, -1)).expect("f32 probabilities");
    flat.chunks(vocab as usize).map(<[f32]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lm::LmShape;
    use tch::nn;

    fn model() -> (nn::VarStore, BiLm) {
        tch::manual_seed(11);
        let vs = nn::VarStore::new(Device::Cpu);
        let lm = BiLm::new(
            &vs.root(),
            LmShape {
                vocab: 20,
                embedding: 8,
                hidden: 8,
                layers: 1,
                dropout: 0.0,
            },
        );
        (vs, lm)
    }

    /// The tokens of each job's endings.
    fn tokens(drawn: &[Vec<Drawn>]) -> Vec<Vec<Vec<i64>>> {
        drawn
            .iter()
            .map(|job| job.iter().map(|d| d.tokens.clone()).collect())
            .collect()
    }

    fn settings() -> SampleSettings {
        SampleSettings {
            max_tokens: 6,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            typical_p: 1.0,
            stop: vec![4],
            device: Device::Cpu,
        }
    }

    #[test]
    fn samples_respect_bans_stops_and_do_not_depend_on_batch_mates() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = model();
        let u1: Vec<f32> = (0..5 * 6)
            .map(|i| ((i * 37) % 100) as f32 / 100.0)
            .collect();
        let u2: Vec<f32> = (0..3 * 6)
            .map(|i| ((i * 53) % 100) as f32 / 100.0)
            .collect();
        let p1: &[i64] = &[BOS, 5, 6, 7];
        let p2: &[i64] = &[BOS, 8, 9];
        let together = sample(
            &lm,
            &[
                SampleJob {
                    prefix: p1,
                    count: 5,
                    uniforms: &u1,
                },
                SampleJob {
                    prefix: p2,
                    count: 3,
                    uniforms: &u2,
                },
            ],
            &settings(),
        );
        let alone = sample(
            &lm,
            &[SampleJob {
                prefix: p2,
                count: 3,
                uniforms: &u2,
            }],
            &settings(),
        );
        assert_eq!(
            tokens(&together)[1],
            tokens(&alone)[0],
            "an item's samples do not depend on its batch mates"
        );
        for e in tokens(&together).iter().flatten() {
            assert!(!e.is_empty() && e.len() <= 6);
            assert!(e.iter().all(|&t| t > EOS), "no special token in {e:?}");
            assert!(e[0] != 4, "no stop token first");
            assert!(
                e[..e.len() - 1].iter().all(|&t| t != 4),
                "stops at the first stop token"
            );
        }
    }

    #[test]
    fn first_tokens_follow_the_model_distribution() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = model();
        let prefix: &[i64] = &[BOS, 5, 6];
        let n = 4000;
        let u: Vec<f32> = (0..n)
            .flat_map(|i| [(i as f32 + 0.5) / n as f32, 0.0])
            .collect();
        let s = SampleSettings {
            max_tokens: 2,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            typical_p: 1.0,
            stop: vec![],
            device: Device::Cpu,
        };
        let drawn = sample(
            &lm,
            &[SampleJob {
                prefix,
                count: n,
                uniforms: &u,
            }],
            &s,
        );
        let mut counts = [0f64; 20];
        for e in &drawn[0] {
            counts[e.tokens[0] as usize] += 1.0;
        }
        // The model's own first-token distribution, with the banned tokens removed.
        let (_, top) = lm.encode_prefixes(
            &lm.forward,
            &pad_batch(&[prefix], Device::Cpu),
            &Tensor::from_slice(&[3i64]),
        );
        let mut logits = lm.logits(&lm.forward, &top).get(0);
        let _ = logits.index_fill_(
            0,
            &Tensor::from_slice(&[PAD, UNK, BOS, EOS]),
            f64::NEG_INFINITY,
        );
        let p = Vec::<f32>::try_from(logits.softmax(0, Kind::Float)).unwrap();
        for t in 0..20 {
            let expected = f64::from(p[t]);
            assert!(
                (counts[t] / n as f64 - expected).abs() < 0.01,
                "token {t}: {} vs {expected}",
                counts[t] / n as f64
            );
        }
    }

    #[test]
    fn top_k_and_top_p_keep_the_most_likely_tokens_renormalised() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = model();
        let prefix: &[i64] = &[BOS, 5, 6];
        let with = |top_k, top_p| {
            first_token_distribution(
                &lm,
                &[prefix],
                &SampleSettings {
                    top_k,
                    top_p,
                    ..settings()
                },
            )
            .remove(0)
        };
        let full = with(0, 1.0);
        let mut ranked: Vec<usize> = (0..full.len()).collect();
        ranked.sort_by(|&a, &b| full[b].total_cmp(&full[a]));
        // Top 3: the three most likely tokens, in their proportions.
        let k3 = with(3, 1.0);
        let mass: f32 = ranked[..3].iter().map(|&t| full[t]).sum();
        for (rank, &t) in ranked.iter().enumerate() {
            let want = if rank < 3 { full[t] / mass } else { 0.0 };
            assert!(
                (k3[t] - want).abs() < 1e-5,
                "token {t}: {} vs {want}",
                k3[t]
            );
        }
        // Nucleus 0.5: the fewest tokens whose mass reaches 0.5.
        let p = with(0, 0.5);
        let mut cum = 0.0;
        let kept = ranked
            .iter()
            .take_while(|&&t| {
                let before = cum;
                cum += full[t];
                before < 0.5
            })
            .count();
        assert!(kept >= 1 && kept < ranked.len(), "{kept}");
        let mass: f32 = ranked[..kept].iter().map(|&t| full[t]).sum();
        for (rank, &t) in ranked.iter().enumerate() {
            let want = if rank < kept { full[t] / mass } else { 0.0 };
            assert!((p[t] - want).abs() < 1e-5, "token {t}: {} vs {want}", p[t]);
        }
        // A tiny nucleus still keeps the most likely token; both off is the full distribution.
        let one = with(0, 1e-6);
        assert!((one[ranked[0]] - 1.0).abs() < 1e-6);
        assert_eq!(with(0, 1.0), full);
        // And the sampler draws only kept tokens.
        let u: Vec<f32> = (0..500)
            .flat_map(|i| [(i as f32 + 0.5) / 500.0; 6])
            .collect();
        let drawn = sample(
            &lm,
            &[SampleJob {
                prefix,
                count: 500,
                uniforms: &u,
            }],
            &SampleSettings {
                top_k: 3,
                ..settings()
            },
        );
        assert!(drawn[0]
            .iter()
            .all(|e| ranked[..3].contains(&(e.tokens[0] as usize))));
    }

    /// The tokens of each row that [`typical_set`] keeps.
    fn kept_by_typical_set(logits: &Tensor, typical_p: f64) -> Vec<Vec<usize>> {
        let out = typical_set(logits.shallow_clone(), typical_p);
        let cols = logits.size()[1] as usize;
        let flat = Vec::<f32>::try_from(out.flatten(0, -1)).expect("f32 logits");
        flat.chunks(cols)
            .map(|row| (0..cols).filter(|&t| row[t].is_finite()).collect())
            .collect()
    }

    #[test]
    fn the_typical_set_keeps_the_tokens_whose_surprisal_is_nearest_the_entropy() {
        // p = [0.5, 0.2, 0.15, 0.1, 0.05]: entropy 1.333 nats; surprisals 0.69, 1.61, 1.90, 2.30,
        // 3.00, so by distance from it: token 1, 2, 0, 3, 4. A banned token (-inf) in a second row
        // changes neither its entropy nor its set.
        let p = [0.5f32, 0.2, 0.15, 0.1, 0.05];
        let mut row: Vec<f32> = p.iter().map(|x| x.ln()).collect();
        row.push(f32::NEG_INFINITY);
        let logits = Tensor::from_slice(&row).view([1, 6]).repeat([2, 1]);
        let _ = logits.get(0).narrow(0, 5, 1).fill_(-30.0);
        let _ = logits.get(1).narrow(0, 0, 5).g_add_scalar_(3.0);
        // Row 0 has a sixth token of probability e^-30 (surprisal 30, last); row 1 bans it.
        assert_eq!(
            kept_by_typical_set(&logits, 0.3),
            vec![vec![1, 2], vec![1, 2]]
        );
        assert_eq!(
            kept_by_typical_set(&logits, 0.9),
            vec![vec![0, 1, 2, 3], vec![0, 1, 2, 3]]
        );
        // The most likely token can be outside; some token is always in.
        assert_eq!(kept_by_typical_set(&logits, 1e-6), vec![vec![1], vec![1]]);
        assert_eq!(
            kept_by_typical_set(&logits, 0.999),
            vec![vec![0, 1, 2, 3, 4], vec![0, 1, 2, 3, 4]]
        );

        // Against a plain reference on random rows (f64, sorted by distance, no ties).
        tch::manual_seed(5);
        let logits = Tensor::randn([8, 300], (Kind::Float, Device::Cpu)) * 2.0;
        let flat = Vec::<f32>::try_from(logits.flatten(0, -1)).expect("f32");
        for typical_p in [0.2, 0.5, 0.95] {
            let want: Vec<Vec<usize>> = flat
                .chunks(300)
                .map(|row| {
                    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                    let z: f64 = row.iter().map(|&l| (l as f64 - m).exp()).sum();
                    let lp: Vec<f64> = row.iter().map(|&l| l as f64 - m - z.ln()).collect();
                    let h: f64 = -lp.iter().map(|l| l.exp() * l).sum::<f64>();
                    let mut order: Vec<usize> = (0..300).collect();
                    order.sort_by(|&a, &b| (-lp[a] - h).abs().total_cmp(&(-lp[b] - h).abs()));
                    let mut before = 0.0;
                    let mut kept: Vec<usize> = order
                        .into_iter()
                        .take_while(|&t| {
                            let inside = before < typical_p;
                            before += lp[t].exp();
                            inside
                        })
                        .collect();
                    kept.sort_unstable();
                    kept
                })
                .collect();
            assert_eq!(
                kept_by_typical_set(&logits, typical_p),
                want,
                "typical-p {typical_p}"
            );
        }
    }

    #[test]
    fn the_sampler_draws_only_from_the_typical_set() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = model();
        let prefix: &[i64] = &[BOS, 5, 6];
        let typical = SampleSettings {
            typical_p: 0.5,
            ..settings()
        };
        let dist = first_token_distribution(&lm, &[prefix], &typical).remove(0);
        let allowed: Vec<usize> = (0..dist.len()).filter(|&t| dist[t] > 0.0).collect();
        let full = first_token_distribution(&lm, &[prefix], &settings()).remove(0);
        assert!(
            !allowed.is_empty() && allowed.len() < full.iter().filter(|&&p| p > 0.0).count(),
            "{allowed:?}"
        );
        let u: Vec<f32> = (0..400)
            .flat_map(|i| [(i as f32 + 0.5) / 400.0; 6])
            .collect();
        let drawn = sample(
            &lm,
            &[SampleJob {
                prefix,
                count: 400,
                uniforms: &u,
            }],
            &typical,
        );
        assert!(drawn[0]
            .iter()
            .all(|e| allowed.contains(&(e.tokens[0] as usize))));
    }

    #[test]
    fn the_nucleus_among_the_top_tokens_is_the_sorted_nucleus() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(5);
        // Flat and peaked rows, some with banned tokens, so that some nuclei fit in 16
        // candidates and others need the whole sort.
        let scale = Tensor::from_slice(&[0.3f32, 1.0, 3.0, 8.0])
            .repeat([16])
            .unsqueeze(1);
        let logits = Tensor::randn([64, 300], (Kind::Float, Device::Cpu)) * scale;
        let _ = logits
            .narrow(0, 0, 8)
            .narrow(1, 0, 50)
            .fill_(f64::NEG_INFINITY);
        for top_p in [0.05, 0.5, 0.9, 0.99] {
            let sorted = nucleus_by_sort(logits.shallow_clone(), top_p).isfinite();
            let kept_16 = nucleus_among_top(logits.shallow_clone(), top_p, 16).isfinite();
            assert!(sorted.equal(&kept_16), "top-p {top_p}");
            let on_host = nucleus_on_host(logits.shallow_clone(), top_p).isfinite();
            assert!(sorted.equal(&on_host), "top-p {top_p}");
            let sizes =
                Vec::<i64>::try_from(sorted.sum_dim_intlist(1, false, Kind::Int64)).unwrap();
            if top_p == 0.9 {
                assert!(
                    sizes.iter().any(|&n| n <= 16) && sizes.iter().any(|&n| n > 16),
                    "both paths taken: {sizes:?}"
                );
            }
        }
    }

    #[test]
    fn the_nucleus_found_on_the_host_is_the_sorted_nucleus_at_a_vocabulary_s_size() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(11);
        // Rows shaped like a trained LM's (a few likely tokens, a long tail) and flat ones, at
        // the ActivityNet vocabulary's size: nuclei from a handful of tokens to thousands, their
        // edges in buckets of every crowding.
        let scale = Tensor::from_slice(&[0.5f32, 1.5, 3.0, 6.0])
            .repeat([64])
            .unsqueeze(1);
        let logits = Tensor::randn([256, 5949], (Kind::Float, Device::Cpu)) * scale;
        let mut sizes = Vec::new();
        for top_p in [0.1, 0.5, 0.9, 0.95] {
            let sorted = nucleus_by_sort(logits.shallow_clone(), top_p).isfinite();
            let on_host = nucleus_on_host(logits.shallow_clone(), top_p).isfinite();
            let differ = sorted.ne_tensor(&on_host).any_dim(1, false);
            assert_eq!(
                i64::try_from(differ.sum(Kind::Int64)).unwrap(),
                0,
                "top-p {top_p}"
            );
            sizes.extend(
                Vec::<i64>::try_from(sorted.sum_dim_intlist(1, false, Kind::Int64)).unwrap(),
            );
        }
        let (least, most) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(
            *least <= 5 && *most >= 3000,
            "nuclei of {least} to {most} tokens"
        );
    }

    #[test]
    fn a_row_whose_mass_falls_short_of_top_p_by_rounding_keeps_every_token() {
        let row = [0.25f32; 4];
        assert_eq!(nucleus_floor(&row, 1.0 + 1e-9), 0.0);
        // Ties with the last token the nucleus needs are kept, whatever their order.
        assert_eq!(nucleus_floor(&row, 0.3), 0.25);
        assert_eq!(nucleus_floor(&[0.5, 0.3, 0.2, 0.0], 0.5), 0.5);
        assert_eq!(nucleus_floor(&[0.5, 0.3, 0.2, 0.0], 0.50001), 0.3);
    }

    #[test]
    fn dropping_finished_rows_changes_no_ending() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = model();
        let n = 300;
        let u: Vec<f32> = (0..n * 12)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let (p1, p2): (&[i64], &[i64]) = (&[BOS, 5, 6], &[BOS, 8]);
        let jobs = [
            SampleJob {
                prefix: p1,
                count: n / 2,
                uniforms: &u[..n * 6],
            },
            SampleJob {
                prefix: p2,
                count: n / 2,
                uniforms: &u[n * 6..],
            },
        ];
        // Three stop tokens: rows end at every step, some run to `max_tokens`.
        for top_p in [1.0, 0.8] {
            let s = SampleSettings {
                max_tokens: 12,
                stop: vec![4, 7, 9],
                top_p,
                ..settings()
            };
            let dropping = sample_dropping_finished(&lm, &jobs, &s, true);
            let lengths: Vec<usize> = dropping.iter().flatten().map(|d| d.tokens.len()).collect();
            assert!(
                lengths.iter().any(|&l| l < 4) && lengths.contains(&12),
                "{lengths:?}"
            );
            let keeping = sample_dropping_finished(&lm, &jobs, &s, false);
            assert_eq!(tokens(&dropping), tokens(&keeping), "top-p {top_p}");
            for (a, b) in dropping.iter().flatten().zip(keeping.iter().flatten()) {
                for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
                    assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
                }
            }
        }
    }

    #[test]
    fn item_features_equal_the_general_ones() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, one_layer) = model();
        let vs2 = nn::VarStore::new(Device::Cpu);
        let two_layers = BiLm::new(
            &vs2.root(),
            LmShape {
                vocab: 20,
                embedding: 8,
                hidden: 6,
                layers: 2,
                dropout: 0.0,
            },
        );
        for lm in [&one_layer, &two_layers] {
            check_item_features(lm);
        }
    }

    fn check_item_features(lm: &BiLm) {
        let (s, n): (&[i64], &[i64]) = (&[5, 6, 7, 8], &[9, 10]);
        let endings: Vec<&[i64]> = vec![&[11, 12, 4], &[13], &[14, 15, 16, 17, 18, 4]];
        // A second item with a longer context and other endings: scored together, in batches
        // of 2 that mix the items.
        let (s2, n2): (&[i64], &[i64]) = (&[7, 6, 5, 9, 9, 10, 11], &[12]);
        let endings2: Vec<&[i64]> = vec![&[13, 14], &[4], &[15, 16, 17, 4]];
        let items = [
            ItemEndings {
                s,
                n,
                endings: endings.iter().map(|&v| v.into()).collect(),
            },
            ItemEndings {
                s: s2,
                n: n2,
                endings: endings2.iter().map(|&v| v.into()).collect(),
            },
        ];
        let fast = items_features(
            lm,
            &items,
            2,
            crate::lm::logit_budget(Device::Cpu),
            Device::Cpu,
        );
        assert_eq!(fast.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3]);
        for (item, got) in items.iter().zip(&fast) {
            let inputs: Vec<FeatureInput> = item
                .endings
                .iter()
                .map(|v| FeatureInput {
                    s: item.s,
                    n: item.n,
                    v: v.ids,
                })
                .collect();
            let general = features(lm, &inputs, 8, Device::Cpu);
            for (a, b) in got.iter().zip(&general) {
                for (x, y) in a.iter().zip(b) {
                    assert!((x - y).abs() < 1e-4, "{a:?} vs {b:?}");
                }
            }
        }
    }

    #[test]
    fn the_sampler_log_probabilities_are_the_feature_pass_ones() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = model();
        let u: Vec<f32> = (0..12 * 6)
            .map(|i| ((i * 41) % 100) as f32 / 100.0)
            .collect();
        let (s, n): (&[i64], &[i64]) = (&[5, 6, 7], &[8]);
        let prefix: Vec<i64> = [&[BOS][..], s, n].concat();
        // Temperature, top-k and the nucleus change what is drawn, not the model's own
        // log-probabilities of it, which are what the features are made of; at temperature 1
        // the bans change the step's logits in place, after the log-softmax is taken.
        for settings in [
            SampleSettings {
                temperature: 0.7,
                top_k: 12,
                top_p: 0.9,
                typical_p: 1.0,
                ..settings()
            },
            settings(),
        ] {
            check_sampler_log_probabilities(&lm, s, n, &prefix, &u, &settings);
        }
    }

    fn check_sampler_log_probabilities(
        lm: &BiLm,
        s: &[i64],
        n: &[i64],
        prefix: &[i64],
        u: &[f32],
        settings: &SampleSettings,
    ) {
        let drawn = sample(
            lm,
            &[SampleJob {
                prefix,
                count: 12,
                uniforms: u,
            }],
            settings,
        )
        .remove(0);
        assert!(
            drawn.iter().any(|d| d.tokens.len() < settings.max_tokens),
            "some rows finished early and left the batch"
        );
        // `given(k)`: the k-th ending comes with the sampler's log-probabilities.
        let score = |given: fn(usize) -> bool| {
            items_features(
                lm,
                &[ItemEndings {
                    s,
                    n,
                    endings: drawn
                        .iter()
                        .enumerate()
                        .map(|(k, d)| {
                            if given(k) {
                                d.into()
                            } else {
                                d.tokens.as_slice().into()
                            }
                        })
                        .collect(),
                }],
                5,
                crate::lm::logit_budget(Device::Cpu),
                Device::Cpu,
            )
            .remove(0)
        };
        // Batches of 5 that mix endings with and without them.
        let (from_sampling, from_a_pass) = (score(|k| k % 3 != 1), score(|_| false));
        for (d, (a, b)) in drawn.iter().zip(from_sampling.iter().zip(&from_a_pass)) {
            assert_eq!(d.logprobs.len(), d.tokens.len());
            assert!(d.logprobs.iter().all(|&lp| lp < 0.0), "{d:?}");
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-5, "{d:?}: {a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn features_agree_with_separate_scoring() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = model();
        let (s, n, v): (&[i64], &[i64], &[i64]) = (&[5, 6, 7], &[8], &[9, 10, 4]);
        let f = features(
            &lm,
            &[
                FeatureInput { s, n, v },
                FeatureInput {
                    s: &[5],
                    n: &[6],
                    v: &[7],
                },
            ],
            8,
            Device::Cpu,
        );
        // fwd log-ppl of s alone is the same whatever follows.
        let alone = lm.token_logprobs(
            &lm.forward,
            &pad_batch(&[&[BOS, 5, 6, 7]], Device::Cpu),
            false,
        );
        let nll = -alone.sum(Kind::Float).double_value(&[]) / 3.0;
        assert!((f[0][3] as f64 - nll).abs() < 1e-5);
        // bwd log-ppl of v alone: the backward model over <bos> rev(v).
        let bv = lm.token_logprobs(
            &lm.backward,
            &pad_batch(&[&[BOS, 4, 10, 9]], Device::Cpu),
            false,
        );
        assert!((f[0][1] as f64 + bv.sum(Kind::Float).double_value(&[]) / 3.0).abs() < 1e-5);
        assert_eq!(&f[0][5..], &[3.0, 1.0, 3.0]);
        assert!(f[0][4] < 0.0, "a log-probability");
    }
}
