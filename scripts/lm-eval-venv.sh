# Sourced by scripts that need Python's side of the LM tooling: `af_lm_eval_venv` makes sure the
# venv $HOME/.cache/af/lm-eval-scores exists and prints its path. It is the venv
# scripts/check-lm-eval-scores builds (the same packages, the same `.ready` marker), so either
# script builds it once for both: lm-eval 0.4.9, transformers and datasets (which bring
# huggingface_hub) and gguf from PyPI; torch is not installed again: a .pth file puts the cached
# torch environment's site-packages on the path (pip then counts torch as installed). Needs no
# network after the first run.
# shellcheck shell=bash
af_lm_eval_venv() {
  local venv=$HOME/.cache/af/lm-eval-scores
  if [ ! -f "$venv/.ready" ]; then
    python3 -m venv "$venv" >&2
    local torch_venv=${AF_TORCH_VENV:-$HOME/.cache/af/torch-2.11.0}
    "$torch_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
      > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/af-torch.pth"
    # lm-eval 0.4.9 imports names that newer transformers and datasets releases dropped.
    "$venv/bin/pip" install -q "lm-eval==0.4.9" "transformers<4.50" "datasets<4" "gguf" >&2
    touch "$venv/.ready"
  fi
  printf '%s\n' "$venv"
}
