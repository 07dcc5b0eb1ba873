pub fn probe() -> i64 { tch::Tensor::from_slice(&[1i64, 2]).sum(tch::Kind::Int64).int64_value(&[]) }
