// UcxTransport answering peers' reads of our region, on the progress thread: a READ_REQUEST is
// checked against the region and answered with READ_REPLY chunks sent straight from it, on the
// endpoint the request arrived on. The puller's side is ucx_transport_pulls.cpp; the wire format
// and the lifetimes of the send buffers, ucx_transport_internal.hpp.
//
// A puller that dies (or drops its endpoint) while we answer only makes our sends complete with
// an error status, counted in serves_failed; ucx_transport.hpp explains why this is not left to
// UCX's emulated get, which aborts the process in that case on UCX 1.13's tcp.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>
#include <ucp/api/ucp.h>

#include "actors/kv_cache/transfer/ucx_transport_internal.hpp"

namespace troupe::kv_transfer::detail {

ucs_status_t UcxTransport::read_request_callback(void* arg, const void* header,
                                                 size_t header_length, void* data, size_t length,
                                                 const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  if (header_length != sizeof(ReadRequestHeader) ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0 ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    // Not from one of our engines (they send eagerly, asking for a reply endpoint): nobody to
    // answer, and the puller times out.
    spdlog::warn("kv-transfer: dropped a malformed read request ({} header bytes, attr {:#x})",
                 header_length, param->recv_attr);
    return UCS_OK;
  }
  ReadRequestHeader request;
  std::memcpy(&request, header, sizeof(request));  // UCX does not align the header
  // Replies are sent from here, inside the handler: reply_ep is only sure to be alive now.
  self->serve_read_request(request, data, length, param->reply_ep);
  return UCS_OK;
}

void UcxTransport::serve_read_request(const ReadRequestHeader& request, const void* data,
                                      size_t length, ucp_ep_h reply_endpoint) {
  // The count must match the data before anything is sized by it.
  bool valid = length % sizeof(ReadRange) == 0 && length / sizeof(ReadRange) == request.num_reads;
  std::vector<ReadRange> ranges(valid ? request.num_reads : 0);
  if (valid) std::memcpy(ranges.data(), data, length);
  for (const ReadRange& range : ranges) {
    valid =
        valid && range.bytes <= region_bytes_ && range.remote_offset <= region_bytes_ - range.bytes;
  }
  auto owned = std::make_unique<SendBuffers>();
  SendBuffers* buffers = owned.get();
  buffers->owner = this;
  if (!valid) {
    // A bug on the puller's side (it checks the ranges against our descriptor first): say so at
    // once instead of letting it time out.
    buffers->reply_headers.push_back(
        {.pull_id = request.pull_id, .read_index = 0, .status = ReadReplyHeader::kRefused});
  } else {
    const uint64_t chunk = std::max<uint64_t>(config_.reply_chunk_bytes, 1);
    for (uint32_t index = 0; index < ranges.size(); ++index) {
      for (uint64_t offset = 0; offset < ranges[index].bytes; offset += chunk) {
        buffers->reply_headers.push_back(
            {.pull_id = request.pull_id, .read_index = index, .offset = offset});
      }
    }
  }
  // Every header is in place before the first send: UCX keeps pointers to them.
  for (const ReadReplyHeader& header : buffers->reply_headers) {
    const void* bytes = nullptr;
    size_t bytes_length = 0;
    if (header.status == ReadReplyHeader::kData) {
      const ReadRange& range = ranges[header.read_index];
      bytes = region_base_ + range.remote_offset + header.offset;
      bytes_length = static_cast<size_t>(
          std::min<uint64_t>(config_.reply_chunk_bytes, range.bytes - header.offset));
    }
    if (!send_reply(buffers, reply_endpoint, header, bytes, bytes_length)) break;
  }
  buffers->all_issued = true;
  if (buffers->sends_in_flight > 0) send_buffers_.emplace(buffers, std::move(owned));
}

bool UcxTransport::send_reply(SendBuffers* buffers, ucp_ep_h reply_endpoint,
                              const ReadReplyHeader& header, const void* data, size_t length) {
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMH;
  params.cb.send = &UcxTransport::send_completed_callback;
  params.user_data = buffers;
  params.flags = UCP_AM_SEND_FLAG_EAGER;  // never rendezvous: ucx_transport.hpp says why
  params.memh = region_memory_handle_;    // the bytes lie in our registered region
  if (data == nullptr) params.op_attr_mask &= ~UCP_OP_ATTR_FIELD_MEMH;
  const ucs_status_ptr_t request = ucp_am_send_nbx(reply_endpoint, kReadReplyAmId, &header,
                                                   sizeof(header), data, length, &params);
  if (UCS_PTR_IS_ERR(request)) {
    // The endpoint has failed already (the puller is gone): the rest would fail the same way.
    if (!buffers->failed) num_serves_failed_.fetch_add(1);
    buffers->failed = true;
    return false;
  }
  num_bytes_served_.fetch_add(length);
  if (request != nullptr) ++buffers->sends_in_flight;
  return true;
}

}  // namespace troupe::kv_transfer::detail
