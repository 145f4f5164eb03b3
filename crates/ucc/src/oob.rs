//! The application's out-of-band allgather (`ucc_oob_coll_t`) as coll's [`coll::Oob`].

use crate::ffi::*;
use std::ffi::c_void;
use std::time::{Duration, Instant};
use ucs::{Result as UResult, Status as UStatus};

pub struct COob {
    oob: OobColl,
    req: *mut c_void,
    src: Vec<u8>,
    recv: Vec<u8>,
}

// SAFETY: the callbacks and their `coll_info` are the application's, which UCC allows to
// be called from whichever thread drives the team creation; the buffers are owned here.
unsafe impl Send for COob {}

impl COob {
    pub fn new(o: &OobColl) -> Result<COob, Status> {
        if o.allgather.is_none() || o.req_test.is_none() || o.req_free.is_none() {
            return Err(UCC_ERR_INVALID_PARAM);
        }
        if o.n_oob_eps == 0 || o.oob_ep >= o.n_oob_eps {
            return Err(UCC_ERR_INVALID_PARAM);
        }
        Ok(COob {
            oob: *o,
            req: std::ptr::null_mut(),
            src: Vec::new(),
            recv: Vec::new(),
        })
    }
}

impl coll::Oob for COob {
    fn rank(&self) -> usize {
        self.oob.oob_ep as usize
    }

    fn size(&self) -> usize {
        self.oob.n_oob_eps as usize
    }

    fn post(&mut self, data: &[u8]) -> UResult<()> {
        if !self.req.is_null() {
            return Err(UStatus::Busy);
        }
        self.src = data.to_vec();
        self.recv = vec![0; data.len() * self.size()];
        let f = self.oob.allgather.ok_or(UStatus::InvalidParam)?;
        let mut req = std::ptr::null_mut();
        // SAFETY: the application's allgather; `src` and `recv` stay allocated (owned by
        // self, never reallocated) until the request completes in `test`.
        let s = unsafe {
            f(
                self.src.as_mut_ptr().cast(),
                self.recv.as_mut_ptr().cast(),
                data.len(),
                self.oob.coll_info,
                &mut req,
            )
        };
        if s != UCC_OK {
            tracing::error!("ucc: the OOB allgather failed to start ({s})");
            return Err(UStatus::IoError);
        }
        self.req = req;
        Ok(())
    }

    fn test(&mut self) -> UResult<Option<Vec<u8>>> {
        let (Some(test), Some(free)) = (self.oob.req_test, self.oob.req_free) else {
            return Err(UStatus::InvalidParam);
        };
        // SAFETY: the request the application's allgather returned, not yet freed.
        let s = unsafe { test(self.req) };
        if s == UCC_INPROGRESS {
            return Ok(None);
        }
        // SAFETY: as above; freed once, then forgotten.
        unsafe { free(self.req) };
        self.req = std::ptr::null_mut();
        if s != UCC_OK {
            tracing::error!("ucc: the OOB allgather failed ({s})");
            return Err(UStatus::IoError);
        }
        Ok(Some(std::mem::take(&mut self.recv)))
    }
}

fn wait(o: &mut COob, data: &[u8], deadline: Instant) -> Result<Vec<u8>, Status> {
    use coll::Oob;
    o.post(data).map_err(crate::status)?;
    loop {
        if let Some(all) = o.test().map_err(crate::status)? {
            return Ok(all);
        }
        if Instant::now() > deadline {
            return Err(UCC_ERR_TIMED_OUT);
        }
        std::thread::yield_now();
    }
}

/// Exchanges `mine` (of any length) with every OOB member, blocking: lengths first, then
/// the padded data. Returns every member's bytes in endpoint order.
pub fn exchange(o: &mut COob, mine: &[u8], limit: Duration) -> Result<Vec<Vec<u8>>, Status> {
    use coll::Oob;
    let deadline = Instant::now() + limit;
    let n = o.size();
    let lens = wait(o, &(mine.len() as u64).to_le_bytes(), deadline)?;
    if lens.len() != 8 * n {
        return Err(UCC_ERR_NO_MESSAGE);
    }
    let lens: Vec<usize> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as usize)
        .collect();
    let max = lens.iter().copied().max().unwrap_or(0);
    let mut padded = mine.to_vec();
    padded.resize(max, 0);
    let all = wait(o, &padded, deadline)?;
    if all.len() != max * n {
        return Err(UCC_ERR_NO_MESSAGE);
    }
    Ok((0..n)
        .map(|i| all[i * max..i * max + lens[i]].to_vec())
        .collect())
}
