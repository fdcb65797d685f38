# Per-function (and per-instruction) retired instructions per row from two PC histograms of
# icount_pcs (the patched cpu_icount of icount_pcs.diff: PCS_OUT=prefix writes prefix.N, one file
# per counted call, "pc count" lines; N odd = the small call, even = the large one):
#   g++ -O2 -no-pie -std=c++17 -Iinclude icount_pcs.cpp build/libindexer_q.a -lpthread -o icount_pcs
#   objdump -d --no-show-raw-insn -C icount_pcs > /tmp/pcs.dis
#   PCS_OUT=/tmp/pk ./icount_pcs --kside v4_k_fp8 --isa avx512 --tokens 1
#   python3 pcs_annotate.py /tmp/pk.2:/tmp/pk.1 64 [FUNCTION-SUBSTRING]
# prints (large - small) / rows per function, and with a substring every instruction of the
# matching functions with its count per row.
import sys,re,collections
dis=open('/tmp/pcs.dis').read().splitlines()
cnt={}
large,small=sys.argv[1].split(':')
for l in open(large):
    a,c=l.split(); cnt[int(a,16)]=int(c)
for l in open(small):
    a,c=l.split(); cnt[int(a,16)]=cnt.get(int(a,16),0)-int(c)
total=sum(cnt.values()); rows=float(sys.argv[2])
fn=None; byfn=collections.Counter(); lines=[]
for l in dis:
    m=re.match(r'^([0-9a-f]+) <(.*)>:$',l)
    if m: fn=m.group(2); continue
    m=re.match(r'^\s+([0-9a-f]+):\s+(.*)$',l)
    if m:
        a=int(m.group(1),16)
        if a in cnt:
            byfn[fn]+=cnt[a]; lines.append((fn,a,cnt[a],m.group(2)))
print('total per row %.1f'%(total/rows))
for f,c in byfn.most_common(12): print('%8.1f  %s'%(c/rows,f[:150]))
if len(sys.argv)>3:
    pat=sys.argv[3]
    for fn,a,c,ins in lines:
        if pat in fn: print('%7.2f %x %s'%(c/rows,a,ins))
