//! Test cases of collectives and their reference results, computed locally with a scalar
//! model of the operations written independently of the crate's reduction loops.
#![allow(dead_code)]

pub mod team;

use coll::dtype::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use coll::{Alg, Args, Buffer, CollType, Context, DataType, Op, Team};

/// One collective at one team size.
#[derive(Clone, Debug)]
pub struct Case {
    pub coll: CollType,
    pub alg: Alg,
    pub dt: DataType,
    pub op: Op,
    pub p: usize,
    pub root: usize,
    pub count: usize,
    pub in_place: bool,
    pub seed: u64,
}

impl Case {
    /// A case whose seed also picks the root.
    pub fn seeded(
        coll: CollType,
        alg: Alg,
        (dt, op): (DataType, Op),
        p: usize,
        count: usize,
        in_place: bool,
        seed: u64,
    ) -> Case {
        Case {
            coll,
            alg,
            dt,
            op,
            p,
            root: seed as usize % p,
            count,
            in_place,
            seed,
        }
    }
}

/// One rank's buffers and what its destination must hold afterwards.
#[derive(Clone, Debug, Default)]
pub struct Io {
    pub src: Option<Vec<u8>>,
    pub dst: Option<Vec<u8>>,
    pub expect: Option<Vec<u8>>,
    pub src_v: Option<(Vec<usize>, Vec<usize>)>,
    pub dst_v: Option<(Vec<usize>, Vec<usize>)>,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Element `i` of the data of `rank` (bytes of one element), exact under every op.
pub fn element(dt: DataType, op: Op, seed: u64, rank: usize, i: usize) -> Vec<u8> {
    let h = mix(seed ^ mix(rank as u64 + 1) ^ mix((i as u64) << 20 | 7));
    let small = (h % 5) as i32 - 2;
    let fval = if op == Op::Prod {
        [1.0f32, -1.0, 2.0, -2.0][(h % 4) as usize]
    } else {
        small as f32
    };
    let idx = ((h >> 8) % 3) as i32;
    let v = ((h >> 16) % 3) as i32;
    match dt {
        DataType::Float32 => fval.to_ne_bytes().to_vec(),
        DataType::Float64 => (fval as f64).to_ne_bytes().to_vec(),
        DataType::Float16 => f32_to_f16(fval).to_ne_bytes().to_vec(),
        DataType::Bfloat16 => f32_to_bf16(fval).to_ne_bytes().to_vec(),
        DataType::FloatInt => [(v as f32).to_ne_bytes(), idx.to_ne_bytes()].concat(),
        DataType::IntInt => [v.to_ne_bytes(), idx.to_ne_bytes()].concat(),
        DataType::ShortInt => [
            (v as i16).to_ne_bytes().to_vec(),
            vec![0, 0],
            idx.to_ne_bytes().to_vec(),
        ]
        .concat(),
        DataType::DoubleInt => [
            (v as f64).to_ne_bytes().to_vec(),
            idx.to_ne_bytes().to_vec(),
            vec![0; 4],
        ]
        .concat(),
        DataType::LongInt => [
            (v as i64).to_ne_bytes().to_vec(),
            idx.to_ne_bytes().to_vec(),
            vec![0; 4],
        ]
        .concat(),
        _ => {
            // Integers: random bits, with some zeros for the logical ops.
            let x = if matches!(op, Op::Land | Op::Lor | Op::Lxor) && h % 3 == 0 {
                0
            } else {
                h >> 3
            };
            x.to_ne_bytes()[..dt.size()].to_vec()
        }
    }
}

/// `n` elements of `rank`'s data starting at element `first`.
pub fn data(dt: DataType, op: Op, seed: u64, rank: usize, first: usize, n: usize) -> Vec<u8> {
    (first..first + n)
        .flat_map(|i| element(dt, op, seed, rank, i))
        .collect()
}

/// Filler for bytes a collective must leave alone.
pub fn junk(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (mix(seed ^ i as u64) | 1) as u8).collect()
}

/// The scalar model of one reduction step on one element.
pub fn ref_op(dt: DataType, op: Op, a: &[u8], b: &[u8]) -> Vec<u8> {
    let w = dt.size();
    if dt.is_integer() {
        let signed = matches!(
            dt,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
        );
        let rd = |x: &[u8]| {
            let mut buf = [0u8; 8];
            buf[..w].copy_from_slice(x);
            let u = u64::from_ne_bytes(buf);
            if signed {
                let sh = 64 - 8 * w as u32;
                (((u << sh) as i64) >> sh) as i128
            } else {
                u as i128
            }
        };
        let (x, y) = (rd(a), rd(b));
        let r: i128 = match op {
            Op::Sum => x.wrapping_add(y),
            Op::Prod => ((x as u128).wrapping_mul(y as u128)) as i128,
            Op::Min => x.min(y),
            Op::Max => x.max(y),
            Op::Land => ((x != 0) && (y != 0)) as i128,
            Op::Lor => ((x != 0) || (y != 0)) as i128,
            Op::Lxor => ((x != 0) != (y != 0)) as i128,
            Op::Band => x & y,
            Op::Bor => x | y,
            Op::Bxor => x ^ y,
            _ => panic!("op on integer"),
        };
        return (r as u128 as u64).to_ne_bytes()[..w].to_vec();
    }
    if dt.is_pair() {
        let (voff, ioff) = match dt {
            DataType::DoubleInt | DataType::LongInt => (8, 8),
            _ => (4, 4),
        };
        let val = |x: &[u8]| -> f64 {
            match dt {
                DataType::FloatInt => f32::from_ne_bytes(x[..4].try_into().unwrap()) as f64,
                DataType::IntInt => i32::from_ne_bytes(x[..4].try_into().unwrap()) as f64,
                DataType::ShortInt => i16::from_ne_bytes(x[..2].try_into().unwrap()) as f64,
                DataType::DoubleInt => f64::from_ne_bytes(x[..8].try_into().unwrap()),
                _ => i64::from_ne_bytes(x[..8].try_into().unwrap()) as f64,
            }
        };
        let _ = voff;
        let idx = |x: &[u8]| i32::from_ne_bytes(x[ioff..ioff + 4].try_into().unwrap());
        let (va, vb) = (val(a), val(b));
        let take_b = match op {
            Op::Minloc => vb < va || (vb == va && idx(b) < idx(a)),
            Op::Maxloc => vb > va || (vb == va && idx(b) < idx(a)),
            _ => panic!("op on pair"),
        };
        return if take_b { b.to_vec() } else { a.to_vec() };
    }
    let rd = |x: &[u8]| -> f64 {
        match dt {
            DataType::Float32 => f32::from_ne_bytes(x.try_into().unwrap()) as f64,
            DataType::Float64 => f64::from_ne_bytes(x.try_into().unwrap()),
            DataType::Float16 => f16_to_f32(u16::from_ne_bytes(x.try_into().unwrap())) as f64,
            _ => bf16_to_f32(u16::from_ne_bytes(x.try_into().unwrap())) as f64,
        }
    };
    let (x, y) = (rd(a), rd(b));
    let r = match op {
        Op::Sum | Op::Avg => x + y,
        Op::Prod => x * y,
        Op::Min => x.min(y),
        Op::Max => x.max(y),
        _ => panic!("op on float"),
    };
    match dt {
        DataType::Float32 => (r as f32).to_ne_bytes().to_vec(),
        DataType::Float64 => r.to_ne_bytes().to_vec(),
        DataType::Float16 => f32_to_f16(r as f32).to_ne_bytes().to_vec(),
        _ => f32_to_bf16(r as f32).to_ne_bytes().to_vec(),
    }
}

/// Element-wise reduction of equal-length vectors, in rank order (an average divides
/// the sum by the number of inputs, in f64, rounded once to the type).
pub fn ref_reduce(dt: DataType, op: Op, inputs: &[Vec<u8>]) -> Vec<u8> {
    let w = dt.size();
    let mut acc = inputs[0].clone();
    for x in &inputs[1..] {
        for (a, b) in acc.chunks_exact_mut(w).zip(x.chunks_exact(w)) {
            let r = ref_op(dt, op, a, b);
            a.copy_from_slice(&r);
        }
    }
    if op == Op::Avg {
        let n = inputs.len() as f64;
        for a in acc.chunks_exact_mut(w) {
            let v = match dt {
                DataType::Float32 => f32::from_ne_bytes(a.try_into().unwrap()) as f64,
                DataType::Float64 => f64::from_ne_bytes(a.try_into().unwrap()),
                DataType::Float16 => f16_to_f32(u16::from_ne_bytes(a.try_into().unwrap())) as f64,
                _ => bf16_to_f32(u16::from_ne_bytes(a.try_into().unwrap())) as f64,
            } / n;
            let b = match dt {
                DataType::Float32 => (v as f32).to_ne_bytes().to_vec(),
                DataType::Float64 => v.to_ne_bytes().to_vec(),
                DataType::Float16 => f32_to_f16(v as f32).to_ne_bytes().to_vec(),
                _ => f32_to_bf16(v as f32).to_ne_bytes().to_vec(),
            };
            a.copy_from_slice(&b);
        }
    }
    acc
}

/// Seeds at or above this make the v-layouts random (counts and gaps), for property tests.
pub const RANDOM_LAYOUT: u64 = 1 << 48;

/// Irregular counts with zeros, and displacements with gaps (one element, or random in
/// random-layout mode).
pub fn vlayout(counts: Vec<usize>) -> (Vec<usize>, Vec<usize>) {
    vlayout_seeded(counts, 0)
}

fn vlayout_seeded(counts: Vec<usize>, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut at = 0;
    let displs = counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let d = at;
            let gap = if seed >= RANDOM_LAYOUT {
                (mix(seed ^ 0x9a9 ^ i as u64) % 4) as usize
            } else {
                1
            };
            at += c + gap;
            d
        })
        .collect();
    (counts, displs)
}

fn vcounts(count: usize, p: usize, seed: u64) -> Vec<usize> {
    if seed >= RANDOM_LAYOUT {
        return (0..p)
            .map(|i| (mix(seed ^ (i as u64) << 8) % (2 * count as u64 + 2)) as usize)
            .collect();
    }
    let salt = seed as usize % 3;
    (0..p)
        .map(|i| (count + 3 * i + salt) % (count + 2))
        .collect()
}

fn place(buf: &mut [u8], at: usize, data: &[u8]) {
    buf[at..at + data.len()].copy_from_slice(data);
}

/// Every rank's buffers and expected result for `c`.
pub fn make(c: &Case) -> Vec<Io> {
    use CollType as C;
    let (p, n, dt, op, es) = (c.p, c.count, c.dt, c.op, c.dt.size());
    let d = |r: usize, first: usize, k: usize| data(dt, op, c.seed, r, first, k);
    let j = |len: usize, r: usize| junk(len, c.seed ^ (r as u64) << 40);
    let mut io = vec![Io::default(); p];
    let root = c.root;
    match c.coll {
        C::Barrier => {}
        C::Bcast => {
            for (r, x) in io.iter_mut().enumerate() {
                x.dst = Some(if r == root {
                    d(root, 0, n)
                } else {
                    j(n * es, r)
                });
                x.expect = Some(d(root, 0, n));
            }
        }
        C::Reduce | C::Allreduce => {
            let inputs: Vec<Vec<u8>> = (0..p).map(|r| d(r, 0, n)).collect();
            let res = ref_reduce(dt, op, &inputs);
            for (r, x) in io.iter_mut().enumerate() {
                let gets = c.coll == C::Allreduce || r == root;
                let ip = c.in_place && gets;
                x.src = (!ip).then(|| inputs[r].clone());
                if gets {
                    x.dst = Some(if ip { inputs[r].clone() } else { j(n * es, r) });
                    x.expect = Some(res.clone());
                }
            }
        }
        C::Allgather | C::Allgatherv | C::Gather | C::Gatherv => {
            let v = matches!(c.coll, C::Allgatherv | C::Gatherv);
            let (counts, displs) = if v {
                vlayout_seeded(vcounts(n, p, c.seed), c.seed)
            } else {
                (vec![n; p], (0..p).map(|i| i * n).collect())
            };
            let ext = (0..p).map(|i| displs[i] + counts[i]).max().unwrap_or(0) * es + 3;
            let all = matches!(c.coll, C::Allgather | C::Allgatherv);
            let mut want = j(ext, 999);
            for q in 0..p {
                place(&mut want, displs[q] * es, &d(q, 0, counts[q]));
            }
            for (r, x) in io.iter_mut().enumerate() {
                let gets = all || r == root;
                let ip = c.in_place && gets;
                x.src = (!ip).then(|| d(r, 0, counts[r]));
                if gets {
                    let mut init = j(ext, 999);
                    if ip {
                        place(&mut init, displs[r] * es, &d(r, 0, counts[r]));
                    } else {
                        init = j(ext, 999);
                        // Different junk where the blocks go, same junk in the gaps.
                        for q in 0..p {
                            place(&mut init, displs[q] * es, &j(counts[q] * es, 5000 + q));
                        }
                    }
                    x.dst = Some(init);
                    x.expect = Some(want.clone());
                    if v {
                        x.dst_v = Some((counts.clone(), displs.clone()));
                    }
                } else if v {
                    x.dst_v = Some((counts.clone(), displs.clone()));
                }
            }
        }
        C::Scatter | C::Scatterv => {
            let v = c.coll == C::Scatterv;
            let (counts, displs) = if v {
                vlayout_seeded(vcounts(n, p, c.seed), c.seed)
            } else {
                (vec![n; p], (0..p).map(|i| i * n).collect())
            };
            let ext = (0..p).map(|i| displs[i] + counts[i]).max().unwrap_or(0) * es;
            let mut src = j(ext, 77);
            for q in 0..p {
                place(&mut src, displs[q] * es, &d(root, displs[q], counts[q]));
            }
            for (r, x) in io.iter_mut().enumerate() {
                if r == root {
                    x.src = Some(src.clone());
                }
                if v {
                    x.src_v = Some((counts.clone(), displs.clone()));
                }
                if !(c.in_place && r == root) {
                    x.dst = Some(j(counts[r] * es + 2, r));
                    let mut want = d(root, displs[r], counts[r]);
                    want.extend_from_slice(&j(counts[r] * es + 2, r)[counts[r] * es..]);
                    x.expect = Some(want);
                }
            }
        }
        C::Alltoall | C::Alltoallv => {
            let v = c.coll == C::Alltoallv;
            // cnt(i, k): elements from rank i to rank k.
            let cnt = |i: usize, k: usize| {
                if v && c.seed >= RANDOM_LAYOUT {
                    // Symmetric in place (the input shares the receive layout).
                    let (a, b) = if c.in_place {
                        (i.min(k), i.max(k))
                    } else {
                        (i, k)
                    };
                    (mix(c.seed ^ ((a * 64 + b) as u64) << 16) % (n as u64 + 3)) as usize
                } else if v && !c.in_place {
                    (n + i + 2 * k) % (n + 3)
                } else if v {
                    (n + i + k) % (n + 3)
                } else {
                    n
                }
            };
            for (r, x) in io.iter_mut().enumerate() {
                let (sc, sd) = if v {
                    vlayout_seeded((0..p).map(|k| cnt(r, k)).collect(), c.seed ^ 1)
                } else {
                    (vec![n; p], (0..p).map(|i| i * n).collect())
                };
                let (rc, rd) = if v {
                    vlayout_seeded((0..p).map(|i| cnt(i, r)).collect(), c.seed ^ 2)
                } else {
                    (vec![n; p], (0..p).map(|i| i * n).collect())
                };
                let sext = (0..p).map(|k| sd[k] + sc[k]).max().unwrap_or(0) * es;
                let rext = (0..p).map(|k| rd[k] + rc[k]).max().unwrap_or(0) * es + 3;
                // Rank r's block for k: elements 1000k.. of r's data.
                let mut src = j(sext, 31);
                for k in 0..p {
                    place(&mut src, sd[k] * es, &d(r, 1000 * k, sc[k]));
                }
                let mut want = j(rext, 32);
                for i in 0..p {
                    place(&mut want, rd[i] * es, &d(i, 1000 * r, rc[i]));
                }
                if c.in_place {
                    // The input is in dst with the receive layout (counts symmetric).
                    let mut init = j(rext, 32);
                    for k in 0..p {
                        place(&mut init, rd[k] * es, &d(r, 1000 * k, rc[k]));
                    }
                    x.dst = Some(init);
                } else {
                    x.src = Some(src);
                    x.dst = Some(j(rext, 32));
                }
                x.expect = Some(want);
                if v {
                    x.src_v = Some((sc, sd));
                    x.dst_v = Some((rc, rd));
                }
            }
        }
        C::ReduceScatter | C::ReduceScatterv => {
            let counts = if c.coll == C::ReduceScatter {
                vec![n; p]
            } else {
                vcounts(n, p, c.seed)
            };
            let total: usize = counts.iter().sum();
            let inputs: Vec<Vec<u8>> = (0..p).map(|r| d(r, 0, total)).collect();
            let res = ref_reduce(dt, op, &inputs);
            let mut at = 0;
            for (r, x) in io.iter_mut().enumerate() {
                let mine = &res[at * es..(at + counts[r]) * es];
                at += counts[r];
                if c.in_place {
                    x.dst = Some(inputs[r].clone());
                    let mut want = inputs[r].clone();
                    place(&mut want, 0, mine);
                    x.expect = Some(want);
                } else {
                    x.src = Some(inputs[r].clone());
                    x.dst = Some(j(counts[r] * es + 1, r));
                    let mut want = j(counts[r] * es + 1, r);
                    place(&mut want, 0, mine);
                    x.expect = Some(want);
                }
                if c.coll == C::ReduceScatterv {
                    x.dst_v = Some((counts.clone(), vec![0; p]));
                }
            }
        }
    }
    io
}

/// The arguments of rank `r` (owned buffers).
pub fn args(c: &Case, io: &Io) -> Args<'static> {
    let mut a = Args::new(c.coll)
        .dtype(c.dt)
        .op(c.op)
        .root(c.root)
        .count(c.count)
        .in_place(c.in_place)
        .alg(c.alg);
    if let Some(s) = &io.src {
        a = a.src(Buffer::from_vec(s.clone()));
    }
    if let Some(d) = &io.dst {
        a = a.dst(Buffer::from_vec(d.clone()));
    }
    if let Some((cn, ds)) = &io.src_v {
        a = a.src_v(cn.clone(), ds.clone());
    }
    if let Some((cn, ds)) = &io.dst_v {
        a = a.dst_v(cn.clone(), ds.clone());
    }
    a
}

/// Whether the pair (datatype, op) is worth a case for this collective.
pub fn ops_for(coll: CollType, dt: DataType) -> Vec<Op> {
    if !coll.reduces() {
        return vec![Op::Sum];
    }
    Op::ALL
        .into_iter()
        .filter(|&o| coll::dtype::supported(dt, o))
        .collect()
}

/// Whether `coll` has an in-place form.
pub fn has_in_place(coll: CollType) -> bool {
    !matches!(coll, CollType::Barrier | CollType::Bcast)
}

/// Describes the first differing byte.
pub fn diff(got: &[u8], want: &[u8]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("length {} != {}", got.len(), want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .map(|i| format!("byte {i}: {} != {} (of {})", got[i], want[i], got.len()))
}

/// Runs case `i` at `rank` in one of three ways; returns a description of a mismatch.
pub fn run_one(cx: &mut Context, team: Team, rank: usize, i: usize, c: &Case) -> Option<String> {
    let io = make(c);
    let x = &io[rank];
    let check = |got: Option<Vec<u8>>, pass: &str| -> Option<String> {
        let want = x.expect.as_ref()?;
        let got = got.unwrap_or_default();
        diff(&got, want).map(|d| format!("{c:?} rank {rank} {pass}: {d}"))
    };
    match i % 3 {
        0 => {
            // Blocking, on borrowed slices.
            let src = x.src.clone();
            let mut dst = x.dst.clone();
            let mut a = Args::new(c.coll)
                .dtype(c.dt)
                .op(c.op)
                .root(c.root)
                .count(c.count)
                .in_place(c.in_place)
                .alg(c.alg);
            if let Some(s) = &src {
                a = a.src(Buffer::from_slice(s));
            }
            if let Some(d) = dst.as_mut() {
                a = a.dst(Buffer::from_mut(d));
            }
            if let Some((cn, ds)) = &x.src_v {
                a = a.src_v(cn.clone(), ds.clone());
            }
            if let Some((cn, ds)) = &x.dst_v {
                a = a.dst_v(cn.clone(), ds.clone());
            }
            let alg = match cx.run(team, a) {
                Ok(alg) => alg,
                Err(e) => return Some(format!("{c:?} rank {rank}: {e:?}")),
            };
            assert_eq!(alg, c.alg);
            check(dst, "blocking")
        }
        1 => {
            let r = cx.init(team, args(c, x)).unwrap();
            assert_eq!(cx.algorithm(r).unwrap(), c.alg);
            cx.post(r).unwrap();
            // Test a few times (as a caller overlapping work would), then wait.
            for _ in 0..3 {
                if cx.test(r).unwrap() {
                    break;
                }
            }
            cx.wait(r).unwrap();
            let a = cx.finalize(r).unwrap();
            check(a.dst.and_then(Buffer::into_vec), "nonblocking")
        }
        _ => {
            // Persistent: posted twice (in place, the input is consumed by the first run,
            // so only once).
            let r = cx.init(team, args(c, x)).unwrap();
            cx.post(r).unwrap();
            cx.wait(r).unwrap();
            if !c.in_place {
                cx.post(r).unwrap();
                cx.wait(r).unwrap();
            }
            let a = cx.finalize(r).unwrap();
            check(a.dst.and_then(Buffer::into_vec), "persistent")
        }
    }
}
