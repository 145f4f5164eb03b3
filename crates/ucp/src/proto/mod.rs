//! The protocol layer's wire: the one table of active-message ids, the codecs of every
//! protocol message, and the choice of protocol by message size.
//!
//! Nothing here keeps state; the protocol modules (tag, am, stream, rma, rndv) encode and
//! decode through these functions only.

pub mod am;
pub mod header;
pub mod rma;
pub mod select;

/// Every transport active-message id ucp uses. Ids are stable on the wire; gaps are
/// retired ids that a decoder refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AmId {
    /// Tag message in one piece (`header`).
    EagerOnly = 1,
    /// Synchronous tag message in one piece.
    EagerSync = 2,
    /// First fragment of a tag message.
    EagerFirst = 3,
    /// Further fragment of a tag message.
    EagerMiddle = 4,
    /// Tag rendezvous announcement.
    Rts = 5,
    /// Rendezvous (tag or active message) done: the sender may release its buffer.
    Ats = 6,
    /// A synchronous send was matched.
    SyncAck = 7,
    /// The sender's worker address (makes the endpoint back to it).
    Wireup = crate::core::AM_WIREUP,
    /// Emulated put (`rma`).
    Put = 9,
    GetReq = 10,
    GetRep = 11,
    AmoReq = 12,
    AmoRep = 13,
    /// Acknowledgement of an emulated put.
    Ack = 14,
    /// Active message in one piece (`am`).
    AmEager = 15,
    /// Active-message rendezvous announcement.
    AmRts = 16,
    /// Stream bytes.
    Stream = 17,
    /// First fragment of an active message.
    AmFirst = 18,
    /// Further fragment of an active message.
    AmMiddle = 19,
    /// Rendezvous by put: the receiver's buffer (`rndv`).
    Rtr = 20,
    /// Rendezvous by put: every byte was put.
    RndvFin = 21,
    /// Emulated put with remote signal: its last piece, which carries the signal (`rma`).
    PutSignal = 22,
    /// Rendezvous split over shared memory: the receiver's buffer for the first part of
    /// the message, which the sender puts while the receiver reads the rest (`rndv`).
    RtrPart = 23,
}

impl AmId {
    /// The transport id.
    #[inline]
    pub const fn id(self) -> u8 {
        self as u8
    }

    /// The id of a received message; `None` for an id ucp does not use.
    #[inline]
    pub fn from_u8(id: u8) -> Option<AmId> {
        use AmId::*;
        Some(match id {
            1 => EagerOnly,
            2 => EagerSync,
            3 => EagerFirst,
            4 => EagerMiddle,
            5 => Rts,
            6 => Ats,
            7 => SyncAck,
            8 => Wireup,
            9 => Put,
            10 => GetReq,
            11 => GetRep,
            12 => AmoReq,
            13 => AmoRep,
            14 => Ack,
            15 => AmEager,
            16 => AmRts,
            17 => Stream,
            18 => AmFirst,
            19 => AmMiddle,
            20 => Rtr,
            21 => RndvFin,
            22 => PutSignal,
            23 => RtrPart,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::AmId;

    #[test]
    fn ids_round_trip_and_fit_the_transport() {
        let mut seen = 0;
        for id in 0..=255u8 {
            if let Some(a) = AmId::from_u8(id) {
                assert_eq!(a.id(), id);
                assert!(id < uct::AM_ID_MAX);
                seen += 1;
            }
        }
        assert_eq!(seen, 23);
    }
}
