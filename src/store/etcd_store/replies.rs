//! Reading etcd's replies without trusting their shape.
//!
//! etcd-client's `TxnResponse::op_responses` unwraps each operation's
//! response, so a reply that lacks one (a server bug, a proxy, something
//! that is not etcd) would panic distlock in the middle of a run. The
//! contract says no panic whatever a server returns: every transaction's
//! replies are read through [`op_responses`] instead.

use etcd_client::{TxnOpResponse, TxnResponse};

/// The responses of a transaction's operations, or an error (which the
/// store reports as a server failure, exit 125) if one is missing.
pub(super) fn op_responses(resp: &TxnResponse) -> Result<Vec<TxnOpResponse>, etcd_client::Error> {
    if resp.0.responses.iter().any(|op| op.response.is_none()) {
        return Err(etcd_client::Error::Internal(
            "the server's transaction reply lacks an operation's response".into(),
        ));
    }
    Ok(resp.op_responses())
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbRangeResponse, PbResponseOp, PbTxnOpResponse, PbTxnResponse};

    fn reply(ops: Vec<Option<PbTxnOpResponse>>) -> TxnResponse {
        TxnResponse(PbTxnResponse {
            header: None,
            succeeded: true,
            responses: ops
                .into_iter()
                .map(|response| PbResponseOp { response })
                .collect(),
        })
    }

    #[test]
    fn a_reply_without_an_operations_response_is_an_error_not_a_panic() {
        let range = || Some(PbTxnOpResponse::ResponseRange(PbRangeResponse::default()));
        let e = op_responses(&reply(vec![range(), None])).unwrap_err();
        assert!(
            e.to_string().contains("lacks an operation's response"),
            "{e}"
        );
        let ok = op_responses(&reply(vec![range(), range()])).unwrap();
        assert!(matches!(
            ok.as_slice(),
            [TxnOpResponse::Get(_), TxnOpResponse::Get(_)]
        ));
        assert!(op_responses(&reply(Vec::new())).unwrap().is_empty());
    }
}
