# augment.program_input_dir: copies IN (24 images) plus one corrupt .png into WORK/in, runs
# PROGRAM --input over it with --json and --csv, and checks the skip line, the verify result and
# that python3 parses both reports (one run per method, status ok).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/in/nested)
file(GLOB images ${IN}/*)
list(LENGTH images n)
if(NOT n EQUAL 24)
  message(FATAL_ERROR "expected the 24 images of augment.program_runs_and_verifies in ${IN}, found ${n}")
endif()
list(SUBLIST images 0 12 top)
list(SUBLIST images 12 12 nested)
file(COPY ${top} DESTINATION ${WORK}/in)
file(COPY ${nested} DESTINATION ${WORK}/in/nested)
file(WRITE ${WORK}/in/corrupt.png "this is not a PNG")
execute_process(COMMAND ${PROGRAM} --input ${WORK}/in --threads ${THREADS} --method posix,tai-def:posix --overwrite
                        --fsync-every 3 --output ${WORK}/out --json ${WORK}/report.json --csv ${WORK}/report.csv --verify
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 50)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tai-augment --input failed (${rc})")
endif()
foreach(want "input: skipped .*corrupt.png" "input: 24 images from" "verify: ok: 2 runs, 48 records")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "the output does not say '${want}'")
  endif()
endforeach()
execute_process(COMMAND python3 -c "
import csv, json, sys
d = json.load(open(sys.argv[1]))
assert d['schema'] == 'tai-augment/1', d['schema']
runs = d['runs']
assert [r['method'] for r in runs] == ['posix', 'tai-def:posix'], runs
assert all(r['status'] == 'ok' and r['images'] == 24 and r['bytes_output'] > 0 for r in runs), runs
assert d['config']['input'].endswith('/in') and d['config']['fsync_every'] == 3, d['config']
rows = list(csv.DictReader(open(sys.argv[2])))
assert [r['method'] for r in rows] == ['posix', 'tai-def:posix'], rows
print('reports: ok')
" ${WORK}/report.json ${WORK}/report.csv RESULT_VARIABLE prc)
if(NOT prc EQUAL 0)
  message(FATAL_ERROR "the JSON/CSV reports do not parse back as expected")
endif()
