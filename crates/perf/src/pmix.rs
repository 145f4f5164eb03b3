//! A PMIx client, just enough to form a team under a PMIx launcher (Open MPI's `mpirun`,
//! Slurm's `srun --mpi=pmix`): init, this process's rank and the job size, an allgather
//! of byte strings through put, commit, fence and get, and finalize.
//!
//! Hand-written FFI to the system's libpmix (Debian's libpmix-dev, PMIx 4/5). The struct
//! layouts below are those of that header on LP64 (checked there: `pmix_proc_t` 260 bytes
//! with the rank at 256, `pmix_value_t` 32 bytes with the data union at 8,
//! `pmix_info_t` 552 bytes with the flags at 512 and the value at 520); the tests assert
//! the sizes the Rust side computes.
//!
//! Invariant: [`Pmix`] exists only between a successful `PMIx_Init` and its
//! `PMIx_Finalize` (in `Drop`); every call goes through it.

use std::ffi::{c_char, c_int, c_void, CString};
use std::time::Duration;
use ucs::{Result, Status};

const MAX_NSLEN: usize = 255;
const MAX_KEYLEN: usize = 511;
const RANK_WILDCARD: u32 = u32::MAX - 1;
const SUCCESS: c_int = 0;
const TYPE_BOOL: u16 = 1;
const TYPE_INT: u16 = 6;
const TYPE_UINT32: u16 = 14;
const TYPE_BYTE_OBJECT: u16 = 27;
const SCOPE_GLOBAL: u8 = 3;

#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; MAX_NSLEN + 1],
    rank: u32,
}

/// `pmix_value_t`: a type tag and a 24-byte union (8-byte aligned).
#[repr(C)]
struct Value {
    ty: u16,
    data: [u64; 3],
}

#[repr(C)]
struct Info {
    key: [c_char; MAX_KEYLEN + 1],
    flags: u32,
    value: Value,
}

#[link(name = "pmix")]
extern "C" {
    fn PMIx_Init(proc_: *mut Proc, info: *mut Info, ninfo: usize) -> c_int;
    fn PMIx_Finalize(info: *const Info, ninfo: usize) -> c_int;
    fn PMIx_Put(scope: u8, key: *const c_char, val: *mut Value) -> c_int;
    fn PMIx_Commit() -> c_int;
    fn PMIx_Fence(procs: *const Proc, nprocs: usize, info: *const Info, ninfo: usize) -> c_int;
    fn PMIx_Get(
        proc_: *const Proc,
        key: *const c_char,
        info: *const Info,
        ninfo: usize,
        val: *mut *mut Value,
    ) -> c_int;
    fn PMIx_Value_destruct(val: *mut Value);
}

fn key(k: &str) -> Result<CString> {
    if k.len() > MAX_KEYLEN {
        return Err(Status::InvalidParam);
    }
    CString::new(k).map_err(|_| Status::InvalidParam)
}

fn info(k: &str, ty: u16, word: u64) -> Info {
    let mut i = Info {
        key: [0; MAX_KEYLEN + 1],
        flags: 0,
        value: Value {
            ty,
            data: [word, 0, 0],
        },
    };
    for (d, s) in i.key.iter_mut().zip(k.bytes()) {
        *d = s as c_char;
    }
    i
}

fn check(what: &str, rc: c_int) -> Result<()> {
    if rc == SUCCESS {
        Ok(())
    } else {
        tracing::error!("{what} failed: PMIx status {rc}");
        Err(Status::IoError)
    }
}

/// A value PMIx_Get returned; destructed and freed when dropped.
struct Got(*mut Value);

impl Drop for Got {
    fn drop(&mut self) {
        // SAFETY: the pointer came from PMIx_Get, which allocates it with malloc; the
        // header's release macro destructs the content, then frees the struct.
        unsafe {
            PMIx_Value_destruct(self.0);
            libc::free(self.0.cast::<c_void>());
        }
    }
}

/// This process as a PMIx client.
pub struct Pmix {
    me: Proc,
    size: usize,
}

impl Pmix {
    /// Connects to the launcher's PMIx server and reads the job size.
    pub fn init() -> Result<Pmix> {
        let mut me = Proc {
            nspace: [0; MAX_NSLEN + 1],
            rank: 0,
        };
        // SAFETY: `me` is a writable pmix_proc_t; no info array.
        check("PMIx_Init", unsafe {
            PMIx_Init(&mut me, std::ptr::null_mut(), 0)
        })?;
        let mut px = Pmix { me, size: 0 };
        let job = Proc {
            rank: RANK_WILDCARD,
            ..px.me
        };
        let v = px.get(&job, "pmix.job.size")?;
        // SAFETY: `v.0` is the valid value PMIx_Get returned.
        let (ty, word) = unsafe { ((*v.0).ty, (*v.0).data[0]) };
        if ty != TYPE_UINT32 {
            tracing::error!("pmix.job.size has type {ty}, not uint32");
            return Err(Status::IoError);
        }
        px.size = (word & 0xffff_ffff) as usize;
        Ok(px)
    }

    /// This process's rank in the job.
    pub fn rank(&self) -> usize {
        self.me.rank as usize
    }

    /// Processes in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    fn get(&self, p: &Proc, k: &str) -> Result<Got> {
        let k = key(k)?;
        let mut v: *mut Value = std::ptr::null_mut();
        // SAFETY: `p` and `k` are valid for the call; `v` receives a malloc'd value.
        check("PMIx_Get", unsafe {
            PMIx_Get(p, k.as_ptr(), std::ptr::null(), 0, &mut v)
        })?;
        if v.is_null() {
            return Err(Status::IoError);
        }
        Ok(Got(v))
    }

    /// A fence over the whole job, collecting the data put so far, bounded by `timeout`
    /// (whole seconds, at least one).
    fn fence_collect(&self, timeout: Duration) -> Result<()> {
        let infos = [
            info("pmix.collect", TYPE_BOOL, 1),
            info(
                "pmix.timeout",
                TYPE_INT,
                timeout.as_secs().clamp(1, i32::MAX as u64),
            ),
        ];
        // SAFETY: no proc array (the whole namespace); `infos` is valid for the call.
        check("PMIx_Fence", unsafe {
            PMIx_Fence(std::ptr::null(), 0, infos.as_ptr(), infos.len())
        })
    }

    /// A fence over the whole job with no data.
    pub fn fence(&self) -> Result<()> {
        // SAFETY: no proc array (the whole namespace), no info array.
        check("PMIx_Fence", unsafe {
            PMIx_Fence(std::ptr::null(), 0, std::ptr::null(), 0)
        })
    }

    /// Every process's `data` under key `k`, in rank order (this process's included).
    pub fn allgather(&self, k: &str, data: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let ck = key(k)?;
        let mut v = Value {
            ty: TYPE_BYTE_OBJECT,
            data: [data.as_ptr() as u64, data.len() as u64, 0],
        };
        // SAFETY: a byte object pointing at `data`, which PMIx copies during the call.
        check("PMIx_Put", unsafe {
            PMIx_Put(SCOPE_GLOBAL, ck.as_ptr(), &mut v)
        })?;
        // SAFETY: no arguments.
        check("PMIx_Commit", unsafe { PMIx_Commit() })?;
        self.fence_collect(timeout)?;
        let mut out = Vec::with_capacity(self.size);
        for r in 0..self.size {
            let peer = Proc {
                rank: r as u32,
                ..self.me
            };
            let got = self.get(&peer, k)?;
            // SAFETY: `got.0` is the valid value PMIx_Get returned.
            let (ty, ptr, len) = unsafe { ((*got.0).ty, (*got.0).data[0], (*got.0).data[1]) };
            if ty != TYPE_BYTE_OBJECT || (ptr == 0 && len != 0) {
                tracing::error!("{k} of rank {r}: type {ty}, not a byte object");
                return Err(Status::IoError);
            }
            let bytes = if len == 0 {
                Vec::new()
            } else {
                // SAFETY: a byte object's `bytes` points at `size` bytes owned by the value,
                // alive until `got` drops.
                unsafe { std::slice::from_raw_parts(ptr as *const u8, len as usize) }.to_vec()
            };
            out.push(bytes);
        }
        Ok(out)
    }
}

impl Drop for Pmix {
    fn drop(&mut self) {
        // SAFETY: PMIx_Init succeeded when `self` was made; no info array.
        unsafe {
            PMIx_Finalize(std::ptr::null(), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_header() {
        assert_eq!(std::mem::size_of::<Proc>(), 260);
        assert_eq!(std::mem::size_of::<Value>(), 32);
        assert_eq!(std::mem::size_of::<Info>(), 552);
        let i = info("pmix.collect", TYPE_BOOL, 1);
        let base = &i as *const Info as usize;
        assert_eq!(&i.flags as *const u32 as usize - base, 512);
        assert_eq!(&i.value as *const Value as usize - base, 520);
        assert_eq!(
            &i.value.data as *const _ as usize - &i.value as *const _ as usize,
            8
        );
        assert!(key(&"k".repeat(600)).is_err());
    }
}
