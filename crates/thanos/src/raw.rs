//! A gRPC codec that leaves the messages coming in as their bytes, to be decoded where and when
//! the receiver chooses (the federator decodes a backend's answer on the merge's cores, straight
//! into its model, see [`crate::wire`]); what goes out is an [`Outgoing`]: a generated message,
//! or bytes encoded already (a fake endpoint of the measurements sends the same answer to every
//! call without encoding it again).

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes};
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::thanos::RulesRequest;

/// What a [`RawCodec`] sends.
pub trait Outgoing: Send + 'static {
    fn write(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status>;
}

impl Outgoing for Bytes {
    fn write(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&self);
        Ok(())
    }
}

impl Outgoing for RulesRequest {
    fn write(self, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        self.encode(dst)
            .map_err(|error| Status::internal(error.to_string()))
    }
}

/// Sends `E`, receives each message as its bytes.
pub struct RawCodec<E>(PhantomData<fn(E)>);

impl<E> Default for RawCodec<E> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<E: Outgoing> Codec for RawCodec<E> {
    type Encode = E;
    type Decode = Bytes;
    type Encoder = RawCodec<E>;
    type Decoder = RawCodec<E>;

    fn encoder(&mut self) -> RawCodec<E> {
        RawCodec::default()
    }

    fn decoder(&mut self) -> RawCodec<E> {
        RawCodec::default()
    }
}

impl<E: Outgoing> Encoder for RawCodec<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.write(dst)
    }
}

impl<E: Outgoing> Decoder for RawCodec<E> {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        // A split of the receive buffer, not a copy.
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
