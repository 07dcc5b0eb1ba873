//! Log-likelihood of continuations given contexts, as lm-evaluation-harness's `HFLM.loglikelihood`
//! computes it for a causal model, so that `af eval` reports the numbers lm-eval would.
//!
//! The boundary between context and continuation is lm-eval's `_encode_pair`: trailing spaces of
//! the context move to the continuation, the whole text is tokenized once, and the continuation's
//! tokens are the whole's tokens past the context's own tokens (so a merge across the boundary
//! counts as continuation). An empty context is the prefix token (BOS, else end of text) alone.
//! No BOS otherwise (lm-eval's `add_bos_token` is off by default). Sequences longer than the
//! model's context keep their last tokens, as lm-eval's left truncation does.

use tch::{Device, Kind, Tensor};

use super::{CausalLm, CausalLmError};

/// One request: the log-probability of `continuation` after `context`.
#[derive(Clone, Copy, Debug)]
pub struct Continuation<'a> {
    pub context: &'a str,
    pub continuation: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogLikelihood {
    /// Sum over the continuation's tokens of their log-probability (natural log).
    pub logprob: f64,
    /// Whether every continuation token is the model's most likely next token.
    pub greedy: bool,
    /// The continuation's tokens.
    pub tokens: usize,
}

/// A request as token ids: the model reads `inputs` and is scored on the last `scored` of
/// `inputs[1..] + [last]`.
struct RequestIds {
    inputs: Vec<i64>,
    targets: Vec<i64>,
    scored: usize,
}

impl CausalLm {
    /// lm-eval's `_encode_pair`: (context tokens, continuation tokens).
    pub fn token_id_pair(
        &self,
        context: &str,
        continuation: &str,
    ) -> Result<(Vec<i64>, Vec<i64>), CausalLmError> {
        if context.is_empty() {
            let prefix = self.prefix_token.ok_or_else(|| CausalLmError::File {
                path: self.path.clone(),
                message: "no BOS or end-of-text token to stand for an empty context".into(),
            })?;
            return Ok((vec![prefix], self.token_ids(continuation)?));
        }
        let kept = context.trim_end_matches(char::is_whitespace);
        // Python's str.rstrip() strips Unicode whitespace, as `char::is_whitespace` does.
        let (context, continuation) = (kept, format!("{}{continuation}", &context[kept.len()..]));
        let whole = self.token_ids(&format!("{context}{continuation}"))?;
        let context_ids = self.token_ids(context)?;
        let continuation_ids = whole.get(context_ids.len()..).unwrap_or_default().to_vec();
        Ok((context_ids, continuation_ids))
    }

    fn request_ids(&self, r: &Continuation) -> Result<RequestIds, CausalLmError> {
        let (context, continuation) = self.token_id_pair(r.context, r.continuation)?;
        let mut all = context;
        let scored = continuation.len();
        all.extend(continuation);
        // lm-eval: (context + continuation)[-(max_length + 1):][:-1] is the model's input.
        let start = all.len().saturating_sub(self.context_length + 1);
        let all = &all[start..];
        Ok(RequestIds {
            inputs: all[..all.len() - 1].to_vec(),
            targets: all[1..].to_vec(),
            scored,
        })
    }

    /// The log-likelihood of each request's continuation, in the requests' order, `batch_size`
    /// sequences per forward pass (longest first, right-padded). A continuation of no tokens
    /// scores 0.
    pub fn loglikelihoods(
        &self,
        requests: &[Continuation],
        batch_size: usize,
    ) -> Result<Vec<LogLikelihood>, CausalLmError> {
        let _guard = tch::no_grad_guard();
        let request_ids = requests
            .iter()
            .map(|r| self.request_ids(r))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = vec![
            LogLikelihood {
                logprob: 0.0,
                greedy: true,
                tokens: 0,
            };
            requests.len()
        ];
        let mut order: Vec<usize> = (0..request_ids.len())
            .filter(|&i| request_ids[i].scored > 0)
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(request_ids[i].inputs.len()));
        for chunk in order.chunks(batch_size.max(1)) {
            let width = chunk
                .iter()
                .map(|&i| request_ids[i].inputs.len())
                .max()
                .unwrap_or(1);
            let (mut inputs, mut mask) = (
                Vec::with_capacity(chunk.len() * width),
                Vec::with_capacity(chunk.len() * width),
            );
            // The scored positions, flat, and their targets: each request's last `scored`.
            let (mut rows, mut targets) = (Vec::new(), Vec::new());
            for (row, &i) in chunk.iter().enumerate() {
                let e = &request_ids[i];
                let pad = width - e.inputs.len();
                inputs.extend(e.inputs.iter().copied().chain(std::iter::repeat_n(0, pad)));
                mask.extend(
                    std::iter::repeat_n(1i64, e.inputs.len()).chain(std::iter::repeat_n(0, pad)),
                );
                let scored = e.scored.min(e.inputs.len());
                let first = e.inputs.len() - scored;
                rows.extend((row * width + first..row * width + e.inputs.len()).map(|r| r as i64));
                targets.extend_from_slice(&e.targets[first..]);
            }
            let shape = [chunk.len() as i64, width as i64];
            let on = |v: &[i64]| Tensor::from_slice(v).to_device(self.device);
            let (logprobs, greedy) = self.model.next_token_scores_at(
                &on(&inputs).view(shape),
                &on(&mask).view(shape),
                &on(&rows),
                &on(&targets),
            );
            let logprobs: Vec<f32> =
                Vec::try_from(logprobs.to_kind(Kind::Float).to_device(Device::Cpu))?;
            let greedy: Vec<bool> = Vec::try_from(greedy.to_device(Device::Cpu))?;
            let mut at = 0;
            for &i in chunk {
                let e = &request_ids[i];
                let span = at..at + e.scored.min(e.inputs.len());
                at = span.end;
                out[i] = LogLikelihood {
                    logprob: logprobs[span.clone()].iter().map(|&l| f64::from(l)).sum(),
                    greedy: greedy[span].iter().all(|&g| g),
                    tokens: e.scored,
                };
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causal_lm::toy::write_toy_llama;

    fn toy_lm() -> (tempfile::TempDir, CausalLm) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toy.gguf");
        write_toy_llama(&path, 11).unwrap();
        let lm = CausalLm::load(&path, Device::Cpu).unwrap();
        (dir, lm)
    }

    /// The boundary is lm-eval's: trailing spaces move to the continuation, and the continuation's
    /// tokens are the whole text's past the context's.
    #[test]
    fn pairs_are_split_where_lm_eval_splits_them() {
        let (_dir, lm) = toy_lm();
        let (c, k) = lm.token_id_pair("a man ", "walks").unwrap();
        assert_eq!(c, lm.token_ids("a man").unwrap());
        assert_eq!(k, lm.token_ids(" walks").unwrap());
        let whole = lm.token_ids("a man walks").unwrap();
        assert_eq!([c.clone(), k.clone()].concat(), whole);
        // The toy merges a space with the letter after it: " w" is one token of the continuation.
        assert_eq!(k[0], lm.token_ids(" w").unwrap()[0]);
        let (c, k) = lm.token_id_pair("", " walks").unwrap();
        assert_eq!(c, vec![0], "an empty context is the BOS token alone");
        assert_eq!(k, lm.token_ids(" walks").unwrap());
    }

    /// Batched, padded scores equal one-at-a-time scores and the model's unpadded per-token
    /// log-probabilities summed by hand.
    #[test]
    fn batched_scores_equal_one_at_a_time_scores() {
        let (_dir, lm) = toy_lm();
        let pairs = [
            ("a man walks his dog in the park.", " he throws a ball"),
            ("she", " runs"),
            ("the cat sits ", "on the mat and looks out of the window"),
            ("", " a lone continuation"),
            ("two boys play. they", " kick the ball"),
            ("x", ""),
        ];
        let requests: Vec<Continuation> = pairs
            .iter()
            .map(|&(context, continuation)| Continuation {
                context,
                continuation,
            })
            .collect();
        let batched = lm.loglikelihoods(&requests, 4).unwrap();
        for (r, b) in requests.iter().zip(&batched) {
            let alone = lm.loglikelihoods(&[*r], 1).unwrap()[0];
            assert!(
                (alone.logprob - b.logprob).abs() < 1e-4,
                "{r:?}: alone {alone:?}, batched {b:?}"
            );
            assert_eq!((alone.greedy, alone.tokens), (b.greedy, b.tokens));
            let (c, k) = lm.token_id_pair(r.context, r.continuation).unwrap();
            assert_eq!(b.tokens, k.len());
            if k.is_empty() {
                assert_eq!(b.logprob, 0.0);
                continue;
            }
            let all = [c.clone(), k.clone()].concat();
            let per_token = lm
                .model
                .token_logprobs(&Tensor::from_slice(&all).unsqueeze(0));
            let by_hand = per_token
                .narrow(1, (c.len() - 1) as i64, k.len() as i64)
                .sum(Kind::Double)
                .double_value(&[]);
            assert!(
                (by_hand - b.logprob).abs() < 1e-4,
                "{r:?}: by hand {by_hand}, batched {}",
                b.logprob
            );
            assert!(b.logprob < 0.0);
        }
        // A different context changes the score: the context is read.
        let other = lm
            .loglikelihoods(
                &[Continuation {
                    context: "zzz qqq",
                    continuation: " he throws a ball",
                }],
                1,
            )
            .unwrap()[0];
        assert!((other.logprob - batched[0].logprob).abs() > 1e-3);
    }

    /// A sequence longer than the model's context keeps its last tokens.
    #[test]
    fn long_sequences_are_truncated_on_the_left() {
        let (_dir, mut lm) = toy_lm();
        lm.context_length = 8;
        let long = "a b c d e f g h i j k l";
        let r = Continuation {
            context: long,
            continuation: " m n",
        };
        let truncated = lm.loglikelihoods(&[r], 1).unwrap()[0];
        let short = Continuation {
            // The last 9 tokens of the whole: 7 of the context, 2 of the continuation; the model
            // reads 8 of them.
            context: " f g h i j k l",
            continuation: " m n",
        };
        let expected = lm.loglikelihoods(&[short], 1).unwrap()[0];
        assert!(
            (truncated.logprob - expected.logprob).abs() < 1e-4,
            "{truncated:?} {expected:?}"
        );
    }
}
