// SPDX-License-Identifier: GPL-2.0
/*
 * Programs that try to break the storage hooks (the agent's
 * `mode = "hook-safety"` runs them). The kernel must end every chain with
 * an error, or the verifier must refuse the program:
 *
 *  jump         next_offset and verdict come from scratch: runs forever at
 *               one offset (hop cap), jumps outside the device, misaligned,
 *               or returns a garbage verdict.
 *  spin         an unbounded loop: the verifier must refuse it.
 *  write_block  writes into the block just read: refused (read-only).
 *  read_past    reads beyond data_end without a check: refused.
 *  scratch_oob  reads the context past the scratch words: refused.
 *  write_ctx    writes the context's read-only offset field: refused.
 *  bad_helper   calls a helper outside the type's set (the current
 *               task's pid, meaningless in an interrupt): refused.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "chain_abi.h"

SEC("storage_chain/jump")
int jump(struct storage_chain_ctx *ctx)
{
	ctx->next_offset = ctx->scratch[AT_NEXT];
	return (int)ctx->scratch[AT_VERDICT];
}

SEC("storage_chain/spin")
int spin(struct storage_chain_ctx *ctx)
{
	volatile __u64 *s = &ctx->scratch[0];

	while (*s)
		ctx->scratch[1]++;
	return STORAGE_CHAIN_DONE;
}

SEC("storage_chain/write_block")
int write_block(struct storage_chain_ctx *ctx)
{
	__u64 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;

	if ((void *)(data + 1) > end)
		return STORAGE_CHAIN_DONE;
	*data = 0xbad;
	return STORAGE_CHAIN_DONE;
}

SEC("storage_chain/read_past")
int read_past(struct storage_chain_ctx *ctx)
{
	__u64 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;

	if ((void *)(data + 1) > end)
		return STORAGE_CHAIN_DONE;
	ctx->scratch[0] = data[64];	/* 512 B past the checked 8 */
	return STORAGE_CHAIN_DONE;
}

SEC("storage_chain/scratch_oob")
int scratch_oob(struct storage_chain_ctx *ctx)
{
	/* One word past the end of the context. */
	ctx->scratch[0] = *(__u64 *)((char *)ctx + sizeof(*ctx));
	return STORAGE_CHAIN_DONE;
}

SEC("storage_chain/write_ctx")
int write_ctx(struct storage_chain_ctx *ctx)
{
	ctx->offset = ctx->scratch[AT_NEXT];	/* read-only: where the block is */
	return STORAGE_CHAIN_DONE;
}

SEC("storage_chain/bad_helper")
int bad_helper(struct storage_chain_ctx *ctx)
{
	ctx->scratch[0] = bpf_get_current_pid_tgid();
	return STORAGE_CHAIN_DONE;
}

char LICENSE[] SEC("license") = "GPL";
