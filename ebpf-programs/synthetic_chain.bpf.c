// SPDX-License-Identifier: GPL-2.0
/*
 * The HotOS synthetic chain: depth dependent reads at random 4 KiB-aligned
 * offsets, each drawn from a SplitMix64 generator kept in scratch (the
 * same generator as guest-agent/src/workload/btree/synthetic.rs, so user
 * space knows where the chain must end). The program only stands in for
 * parsing: it folds the first word of every block into scratch[SC_SUM].
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "chain_abi.h"

static __always_inline __u64 splitmix64(__u64 *state)
{
	__u64 z;

	*state += 0x9e3779b97f4a7c15ULL;
	z = *state;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

SEC("storage_chain")
int synthetic_chain(struct storage_chain_ctx *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 slots = ctx->scratch[SC_SLOTS];
	__u64 state;

	if (data + sizeof(__u64) <= end)
		ctx->scratch[SC_SUM] ^= *(__u64 *)data;
	if ((__u64)ctx->hop + 1 >= ctx->scratch[SC_DEPTH] || slots == 0)
		return STORAGE_CHAIN_DONE;
	state = ctx->scratch[SC_STATE];
	ctx->next_offset = (splitmix64(&state) % slots) * SC_ALIGN;
	ctx->scratch[SC_STATE] = state;
	return STORAGE_CHAIN_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
