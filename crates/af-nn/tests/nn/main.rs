//! af-nn's integration tests, one binary: custom members, the fine-tuned cross-encoder, the
//! encoder against its reference vectors, TorchScript modules.

mod custom_member;
mod encoder_ft;
mod encoder_reference;
mod torchscript;
