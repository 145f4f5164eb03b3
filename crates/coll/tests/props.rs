//! Property test: v-variants with random counts (zeros included) and random gaps, random
//! team sizes, roots and algorithms, in place or not, run by the simulator and checked
//! against the reference.

mod common;

use coll::sim::{self, Rank};
use coll::{plan, CollType, DataType, Op};
use common::*;
use proptest::prelude::*;

const VCOLLS: [CollType; 5] = [
    CollType::Allgatherv,
    CollType::Alltoallv,
    CollType::Gatherv,
    CollType::Scatterv,
    CollType::ReduceScatterv,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn random_v_layouts(
        which in 0..VCOLLS.len(),
        alg_pick in 0usize..4,
        p in 1usize..=12,
        n in 0usize..24,
        seed in 0u64..1 << 40,
        in_place: bool,
        root_pick in 0usize..64,
        dt_pick in 0usize..3,
    ) {
        let coll = VCOLLS[which];
        let algs = coll.algorithms();
        let (dt, op) = [
            (DataType::Int16, Op::Sum),
            (DataType::Float64, Op::Min),
            (DataType::LongInt, Op::Maxloc),
        ][dt_pick];
        let (dt, op) = if coll.reduces() || dt_pick < 2 { (dt, op) } else { (DataType::Uint8, Op::Sum) };
        let c = Case {
            coll,
            alg: algs[alg_pick % algs.len()],
            dt,
            op,
            p,
            root: root_pick % p,
            count: n,
            in_place,
            seed: RANDOM_LAYOUT | seed,
        };
        let io = make(&c);
        let mut ranks = Vec::new();
        for (r, x) in io.iter().enumerate() {
            let pl = plan(&args(&c, x), r, p, None, 2 + seed as usize % 4);
            prop_assert!(pl.is_ok(), "{c:?} rank {r}: {pl:?}");
            ranks.push(Rank {
                schedule: pl.unwrap().schedule,
                src: x.src.clone().unwrap_or_default(),
                dst: x.dst.clone().unwrap_or_default(),
            });
        }
        let res = sim::run(&mut ranks, c.dt, c.op);
        prop_assert!(res.is_ok(), "{c:?}: {res:?}");
        for (r, (x, rk)) in io.iter().zip(&ranks).enumerate() {
            if let Some(want) = &x.expect {
                let d = diff(&rk.dst, want);
                prop_assert!(d.is_none(), "{c:?} rank {r}: {d:?}");
            }
        }
    }
}
