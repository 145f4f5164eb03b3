//! Interface configuration, read from `UCX_*` variables (see [`VARS`]).

use crate::shm::fifo::Geometry;
use ucs::config::{self, Var};
use ucs::{Result, Status};

/// The variables of the transport layer. `MM_*` are rucx's shm knobs, named like UCX's
/// mm transport knobs where one exists.
pub static VARS: &[Var] = &[
    Var {
        name: "MM_FIFO_SIZE",
        default: "256",
        doc: "Elements in each shm receive FIFO (power of two, 2..65536).",
    },
    Var {
        name: "MM_FIFO_ELEM_SIZE",
        default: "128",
        doc: "Bytes per shm FIFO element including its 16-byte header; bounds the inline (short) payload.",
    },
    Var {
        name: "MM_SEG_SIZE",
        default: "8256",
        doc: "Bytes of the bcopy buffer that belongs to each shm FIFO element (a multiple of 64); bounds bcopy messages.",
    },
    Var {
        name: "MM_RX_MAX_POLL",
        default: "16",
        doc: "Largest number of shm messages one progress call consumes.",
    },
    Var {
        name: "SELF_SEG_SIZE",
        default: "8k",
        doc: "Largest bcopy/zcopy message of the self (loopback) transport.",
    },
];

/// Configuration of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IfaceConfig {
    pub fifo: Geometry,
    pub tcp: crate::tcp::TcpConfig,
    pub udp: crate::udp::UdpConfig,
    pub max_poll: usize,
    pub self_seg_size: usize,
}

impl Default for IfaceConfig {
    fn default() -> Self {
        IfaceConfig {
            tcp: crate::tcp::TcpConfig::default(),
            udp: crate::udp::UdpConfig::default(),
            fifo: Geometry {
                fifo_size: 256,
                elem_size: 128,
                // 8 KiB and one cache line: an 8 KiB payload with its protocol header fits
                // one buffer, and buffers do not all start at the same offset in a page
                // (a power-of-two stride put every buffer's first lines in the same cache
                // sets: 4 KiB tag_lat over shm took 0.52 µs instead of 0.41).
                bcopy_size: 8256,
            },
            max_poll: 16,
            self_seg_size: 8192,
        }
    }
}

impl IfaceConfig {
    /// Reads the configuration from the environment; bad values are an error.
    pub fn from_env() -> Result<IfaceConfig> {
        config::register(VARS);
        let n = |i: usize| -> Result<u32> {
            u32::try_from(config::size(&VARS[i])?).map_err(|_| Status::InvalidParam)
        };
        let cfg = IfaceConfig {
            tcp: crate::tcp::TcpConfig::from_env()?,
            udp: crate::udp::UdpConfig::from_env()?,
            fifo: Geometry {
                fifo_size: n(0)?,
                elem_size: n(1)?,
                bcopy_size: n(2)?,
            },
            max_poll: n(3)? as usize,
            self_seg_size: n(4)? as usize,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<()> {
        self.fifo.validate()?;
        if self.max_poll == 0 || self.self_seg_size < 64 || self.self_seg_size > 1 << 26 {
            return Err(Status::InvalidParam);
        }
        Ok(())
    }
}
