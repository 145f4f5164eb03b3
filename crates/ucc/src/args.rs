//! `ucc_coll_args_t` → `coll::Args`: UCC's buffer conventions per collective, datatypes,
//! operations, counts and displacements (32 or 64 bits, in elements).
//!
//! Collectives that do not reduce move bytes: their counts are scaled to bytes and the
//! element type becomes `Uint8`, so every predefined datatype works there. Reductions need
//! a type and operation coll implements.

use crate::ffi::*;
use coll::{Args, Buffer, CollType, DataType, Op};

/// Bytes per element of each predefined datatype, by id.
pub const DT_SIZES: [usize; DT_PREDEFINED_LAST] =
    [1, 2, 4, 8, 16, 1, 2, 4, 8, 16, 2, 4, 8, 2, 16, 8, 16, 32];

fn dt_id(d: u64) -> Result<usize, Status> {
    if d & DATATYPE_GENERIC != 0 {
        // User-defined (generic) datatypes are not implemented.
        return Err(UCC_ERR_NOT_SUPPORTED);
    }
    let id = (d >> DATATYPE_SHIFT) as usize;
    if d & 0b111 != 0 || id >= DT_PREDEFINED_LAST {
        return Err(UCC_ERR_INVALID_PARAM);
    }
    Ok(id)
}

fn dt_size(d: u64) -> Result<usize, Status> {
    dt_id(d).map(|i| DT_SIZES[i])
}

pub(crate) fn coll_dt(d: u64) -> Result<DataType, Status> {
    use DataType as D;
    Ok(match dt_id(d)? {
        0 => D::Int8,
        1 => D::Int16,
        2 => D::Int32,
        3 => D::Int64,
        5 => D::Uint8,
        6 => D::Uint16,
        7 => D::Uint32,
        8 => D::Uint64,
        10 => D::Float16,
        11 => D::Float32,
        12 => D::Float64,
        13 => D::Bfloat16,
        // 128-bit integers, float128 and the complex types: no reduction for them.
        _ => return Err(UCC_ERR_NOT_SUPPORTED),
    })
}

pub(crate) fn coll_op(o: i32) -> Result<Op, Status> {
    Ok(match o {
        OP_SUM => Op::Sum,
        OP_PROD => Op::Prod,
        OP_MAX => Op::Max,
        OP_MIN => Op::Min,
        OP_LAND => Op::Land,
        OP_LOR => Op::Lor,
        OP_LXOR => Op::Lxor,
        OP_BAND => Op::Band,
        OP_BOR => Op::Bor,
        OP_BXOR => Op::Bxor,
        OP_AVG => Op::Avg,
        // MINLOC/MAXLOC need pair types, which UCC's predefined datatypes lack.
        OP_MAXLOC | OP_MINLOC => return Err(UCC_ERR_NOT_SUPPORTED),
        _ => return Err(UCC_ERR_INVALID_PARAM),
    })
}

fn host(m: i32) -> Result<(), Status> {
    match m {
        MEMORY_TYPE_HOST | MEMORY_TYPE_UNKNOWN => Ok(()),
        0..=4 => Err(UCC_ERR_NOT_SUPPORTED),
        _ => Err(UCC_ERR_INVALID_PARAM),
    }
}

/// Raw application memory of `len` bytes.
unsafe fn raw(p: *mut std::ffi::c_void, len: usize) -> Result<Buffer<'static>, Status> {
    if p.is_null() {
        if len > 0 {
            return Err(UCC_ERR_INVALID_PARAM);
        }
        // SAFETY: an empty buffer at a dangling, aligned address is never dereferenced.
        return Ok(unsafe { Buffer::from_raw(std::ptr::NonNull::dangling().as_ptr(), 0) });
    }
    // SAFETY: UCC's contract: the application's buffer of `len` bytes, valid until the
    // request is finalized.
    Ok(unsafe { Buffer::from_raw(p.cast(), len) })
}

/// `n` entries of a counts or displacements array (u32 unless `wide`).
unsafe fn read_arr(p: *const std::ffi::c_void, n: usize, wide: bool) -> Result<Vec<usize>, Status> {
    if p.is_null() {
        return Err(UCC_ERR_INVALID_PARAM);
    }
    Ok((0..n)
        .map(|i| {
            if wide {
                // SAFETY: the application's array of `n` uint64_t.
                unsafe { p.cast::<u64>().add(i).read_unaligned() as usize }
            } else {
                // SAFETY: the application's array of `n` uint32_t.
                unsafe { p.cast::<u32>().add(i).read_unaligned() as usize }
            }
        })
        .collect())
}

/// A v-buffer's counts and displacements, scaled by `es` (bytes), and its extent.
unsafe fn vbuf(
    v: &BufInfoV,
    flags: u64,
    p: usize,
    es: usize,
) -> Result<(Vec<usize>, Vec<usize>, usize), Status> {
    host(v.mem_type)?;
    // SAFETY: the arrays are the application's, of `p` entries.
    let c = unsafe { read_arr(v.counts, p, flags & COLL_ARGS_FLAG_COUNT_64BIT != 0)? };
    // SAFETY: as above.
    let d = unsafe {
        read_arr(
            v.displacements,
            p,
            flags & COLL_ARGS_FLAG_DISPLACEMENTS_64BIT != 0,
        )?
    };
    let c: Vec<usize> = c.into_iter().map(|x| x * es).collect();
    let d: Vec<usize> = d.into_iter().map(|x| x * es).collect();
    let ext = c.iter().zip(&d).map(|(a, b)| a + b).max().unwrap_or(0);
    Ok((c, d, ext))
}

fn per_rank(total: u64, p: usize) -> Result<usize, Status> {
    let t = total as usize;
    if t % p != 0 {
        tracing::error!("ucc: a count of {t} elements does not divide among {p} ranks");
        return Err(UCC_ERR_INVALID_PARAM);
    }
    Ok(t / p)
}

/// A move applied when the collective completes: UCC's in-place reduce_scatter(v) leaves
/// rank r's block at its own position in the vector, coll's at the start.
#[derive(Clone, Copy, Debug)]
pub struct Fixup {
    pub base: *mut u8,
    pub to: usize,
    pub len: usize,
}

impl Fixup {
    /// Moves the result block into place.
    ///
    /// # Safety
    /// The destination buffer the fixup names must still be valid (it is until the
    /// request is finalized, by UCC's contract).
    pub unsafe fn apply(&self) {
        if self.to > 0 && self.len > 0 {
            // SAFETY: both ranges lie in the destination buffer (checked in
            // `translate`); `copy` handles the overlap.
            unsafe { std::ptr::copy(self.base, self.base.add(self.to), self.len) };
        }
    }
}

/// Translates `a` for `rank` of a team of `p`.
///
/// # Safety
/// The buffers and arrays `a` names must be valid (UCC's contract) until the request is
/// finalized.
pub unsafe fn translate(
    a: &CollArgs,
    flags: u64,
    rank: usize,
    p: usize,
) -> Result<(Args<'static>, Option<Fixup>), Status> {
    use CollType as C;
    let mut fixup = None;
    let in_place = flags & COLL_ARGS_FLAG_IN_PLACE != 0;
    let is_root = a.root as usize == rank;
    // SAFETY: reading the union members UCC documents for each collective below; both
    // are plain data of the same size, so either read is defined.
    let (si, sv, di, dv) = unsafe { (a.src.info, a.src.info_v, a.dst.info, a.dst.info_v) };
    let root = a.root as usize;
    if root >= p
        && matches!(
            a.coll_type,
            COLL_BCAST | COLL_REDUCE | COLL_GATHER | COLL_GATHERV | COLL_SCATTER | COLL_SCATTERV
        )
    {
        return Err(UCC_ERR_INVALID_PARAM);
    }
    let bytes = |coll: CollType| Args::new(coll).dtype(DataType::Uint8);
    // SAFETY: this function's contract: the buffers and arrays `a` names are valid
    // application memory until the request is finalized.
    let buf = |ptr: *mut std::ffi::c_void, len: usize| unsafe { raw(ptr, len) };
    // SAFETY: as above, for the counts and displacements arrays of `p` entries.
    let vb = |v: &BufInfoV, es: usize| unsafe { vbuf(v, flags, p, es) };
    let args = match a.coll_type {
        COLL_BARRIER => Args::new(C::Barrier),
        COLL_BCAST => {
            host(si.mem_type)?;
            let n = si.count as usize * dt_size(si.datatype)?;
            bytes(C::Bcast).dst(buf(si.buffer, n)?).count(n).root(root)
        }
        COLL_ALLREDUCE => {
            let dt = coll_dt(di.datatype)?;
            host(di.mem_type)?;
            let n = di.count as usize;
            let mut x = Args::new(C::Allreduce)
                .dtype(dt)
                .op(coll_op(a.op)?)
                .count(n)
                .in_place(in_place)
                .dst(buf(di.buffer, n * dt.size())?);
            if !in_place {
                host(si.mem_type)?;
                if si.datatype != di.datatype {
                    return Err(UCC_ERR_NOT_SUPPORTED);
                }
                x = x.src(buf(si.buffer, n * dt.size())?);
            }
            x
        }
        COLL_REDUCE => {
            let root_ip = is_root && in_place;
            let dt = coll_dt(if root_ip { di.datatype } else { si.datatype })?;
            let n = if root_ip { di.count } else { si.count } as usize;
            let mut x = Args::new(C::Reduce)
                .dtype(dt)
                .op(coll_op(a.op)?)
                .count(n)
                .root(root)
                .in_place(root_ip);
            if !root_ip {
                host(si.mem_type)?;
                x = x.src(buf(si.buffer, n * dt.size())?);
            }
            if is_root {
                host(di.mem_type)?;
                x = x.dst(buf(di.buffer, n * dt.size())?);
            }
            x
        }
        COLL_ALLGATHER => {
            host(di.mem_type)?;
            let es = dt_size(di.datatype)?;
            let blk = per_rank(di.count, p)? * es;
            let mut x = bytes(C::Allgather)
                .count(blk)
                .in_place(in_place)
                .dst(buf(di.buffer, blk * p)?);
            if !in_place {
                host(si.mem_type)?;
                x = x.src(buf(si.buffer, blk)?);
            }
            x
        }
        COLL_ALLGATHERV => {
            let es = dt_size(dv.datatype)?;
            let (c, d, ext) = vb(&dv, es)?;
            let mut x = bytes(C::Allgatherv)
                .in_place(in_place)
                .dst(buf(dv.buffer, ext)?);
            if !in_place {
                host(si.mem_type)?;
                x = x.src(buf(si.buffer, c[rank])?);
            }
            x.dst_v(c, d)
        }
        COLL_ALLTOALL => {
            host(di.mem_type)?;
            let es = dt_size(di.datatype)?;
            let blk = per_rank(di.count, p)? * es;
            let mut x = bytes(C::Alltoall)
                .count(blk)
                .in_place(in_place)
                .dst(buf(di.buffer, blk * p)?);
            if !in_place {
                host(si.mem_type)?;
                x = x.src(buf(si.buffer, blk * p)?);
            }
            x
        }
        COLL_ALLTOALLV => {
            let es = dt_size(dv.datatype)?;
            let (c, d, ext) = vb(&dv, es)?;
            let mut x = bytes(C::Alltoallv)
                .in_place(in_place)
                .dst(buf(dv.buffer, ext)?)
                .dst_v(c, d);
            if !in_place {
                let es = dt_size(sv.datatype)?;
                let (c, d, ext) = vb(&sv, es)?;
                x = x.src(buf(sv.buffer, ext)?).src_v(c, d);
            }
            x
        }
        COLL_REDUCE_SCATTER => {
            // Not in place: dst.count is this rank's block, src holds p blocks. In place:
            // dst holds the whole vector (dst.count is its total) and rank r's result
            // block stays at its own position r (UCC's convention, unlike MPI's).
            let dt = coll_dt(di.datatype)?;
            host(di.mem_type)?;
            let blk = if in_place {
                per_rank(di.count, p)?
            } else {
                di.count as usize
            };
            let es = dt.size();
            let mut x = Args::new(C::ReduceScatter)
                .dtype(dt)
                .op(coll_op(a.op)?)
                .count(blk)
                .in_place(in_place);
            if in_place {
                x = x.dst(buf(di.buffer, blk * p * es)?);
                fixup = Some(Fixup {
                    base: di.buffer.cast(),
                    to: rank * blk * es,
                    len: blk * es,
                });
            } else {
                host(si.mem_type)?;
                x = x
                    .src(buf(si.buffer, blk * p * es)?)
                    .dst(buf(di.buffer, blk * es)?);
            }
            x
        }
        COLL_REDUCE_SCATTERV => {
            let dt = coll_dt(dv.datatype)?;
            host(dv.mem_type)?;
            let es = dt.size();
            // SAFETY: the application's counts array of `p` entries.
            let c = unsafe { read_arr(dv.counts, p, flags & COLL_ARGS_FLAG_COUNT_64BIT != 0)? };
            let total: usize = c.iter().sum();
            let mut x = Args::new(C::ReduceScatterv)
                .dtype(dt)
                .op(coll_op(a.op)?)
                .in_place(in_place);
            if in_place {
                x = x.dst(buf(dv.buffer, total * es)?);
                fixup = Some(Fixup {
                    base: dv.buffer.cast(),
                    to: c[..rank].iter().sum::<usize>() * es,
                    len: c[rank] * es,
                });
            } else {
                host(si.mem_type)?;
                x = x
                    .src(buf(si.buffer, total * es)?)
                    .dst(buf(dv.buffer, c[rank] * es)?);
            }
            let d = vec![0; p];
            x.dst_v(c, d)
        }
        COLL_GATHER => {
            let root_ip = is_root && in_place;
            let blk = if root_ip {
                host(di.mem_type)?;
                per_rank(di.count, p)? * dt_size(di.datatype)?
            } else {
                host(si.mem_type)?;
                si.count as usize * dt_size(si.datatype)?
            };
            let mut x = bytes(C::Gather).count(blk).root(root).in_place(root_ip);
            if !root_ip {
                x = x.src(buf(si.buffer, blk)?);
            }
            if is_root {
                host(di.mem_type)?;
                x = x.dst(buf(di.buffer, blk * p)?);
            }
            x
        }
        COLL_GATHERV => {
            let root_ip = is_root && in_place;
            let mut x = bytes(C::Gatherv).root(root).in_place(root_ip);
            if is_root {
                let es = dt_size(dv.datatype)?;
                let (c, d, ext) = vb(&dv, es)?;
                if !root_ip {
                    host(si.mem_type)?;
                    x = x.src(buf(si.buffer, c[rank])?);
                }
                x = x.dst(buf(dv.buffer, ext)?).dst_v(c, d);
            } else {
                host(si.mem_type)?;
                let n = si.count as usize * dt_size(si.datatype)?;
                x = x.src(buf(si.buffer, n)?).count(n);
            }
            x
        }
        COLL_SCATTER => {
            let root_ip = is_root && in_place;
            let blk = if root_ip {
                host(si.mem_type)?;
                per_rank(si.count, p)? * dt_size(si.datatype)?
            } else {
                host(di.mem_type)?;
                di.count as usize * dt_size(di.datatype)?
            };
            let mut x = bytes(C::Scatter).count(blk).root(root).in_place(root_ip);
            if is_root {
                host(si.mem_type)?;
                x = x.src(buf(si.buffer, blk * p)?);
            }
            if !root_ip {
                x = x.dst(buf(di.buffer, blk)?);
            }
            x
        }
        COLL_SCATTERV => {
            let root_ip = is_root && in_place;
            let mut x = bytes(C::Scatterv).root(root).in_place(root_ip);
            if is_root {
                let es = dt_size(sv.datatype)?;
                let (c, d, ext) = vb(&sv, es)?;
                if !root_ip {
                    host(di.mem_type)?;
                    x = x.dst(buf(di.buffer, c[rank])?);
                }
                x = x.src(buf(sv.buffer, ext)?).src_v(c, d);
            } else {
                host(di.mem_type)?;
                let n = di.count as usize * dt_size(di.datatype)?;
                x = x.dst(buf(di.buffer, n)?).count(n);
            }
            x
        }
        COLL_FANIN | COLL_FANOUT => return Err(UCC_ERR_NOT_SUPPORTED),
        _ => return Err(UCC_ERR_INVALID_PARAM),
    };
    Ok((args, fixup))
}
