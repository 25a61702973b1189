#!/usr/bin/env bash
# `plumb chat` on a pseudo-terminal, driven through tmux: the banner and prompt come up, a typed message is answered
# token by token (the pane shows part of the answer before the turn's timings), the up arrow recalls the message
# from libedit's history, Enter sends it again, a question's reasoning is dimmed, and /exit ends the chat with
# status 0. The model is models/default with tools/tiny_chat_template.jinja, which opens <think> after a question.
# Usage: chat_tty_test.sh PLUMB_BINARY SOURCE_DIR
set -euo pipefail
plumb=$1
source_dir=$2
command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/setup.sh installs it)"; exit 1; }
scratch=$(mktemp -d "${TMPDIR:-/tmp}/plumb-chat-tty.XXXXXX")
socket=$scratch/tmux.socket
tm() { tmux -S "$socket" "$@"; }
trap 'tm kill-server 2>/dev/null || true; rm -rf "$scratch"' EXIT
model=$scratch/model
mkdir "$model"
for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
  ln -s "$source_dir/models/default/$f" "$model/$f"
done
cp "$source_dir/tools/tiny_chat_template.jinja" "$model/chat_template.jinja"
fail() {
  echo "FAIL: $1"
  echo "--- pane:"
  tm capture-pane -p -t chat || true
  exit 1
}
screen() { tm capture-pane -p -J -t chat; }
# Polls the pane (every 20 ms, up to 120 s) until it holds a line matching the extended regex $1.
wait_for() {
  for _ in $(seq 6000); do
    screen | grep -Eq -- "$1" && return 0
    sleep 0.02
  done
  fail "no line matching '$1' on the pane"
}

# A long sampled answer (seeded, so the same each run), for the pane to be caught mid-answer.
chat_args=(--model "$model" --max-tokens 40 --temperature 0.8 --seed 3)
message="Tell me a fortune."
tm new-session -d -s chat -x 200 -y 50 \
  "$(printf '%q ' "$plumb" chat "${chat_args[@]}"); echo \"chat exited with status \$?\"; sleep 600"
wait_for '^plumb: chat: /reset starts over'
wait_for '^> ?$'
tm send-keys -t chat "$message" Enter
wait_for "^> $message"
# Streaming: some of the answer is on the pane while the turn's timings are not yet.
streamed=0
for _ in $(seq 6000); do
  pane=$(screen)
  if grep -q '^plumb: generated' <<<"$pane"; then break; fi
  after=$(sed -n "/^> $message\$/,\$p" <<<"$pane" | tail -n +2 | tr -d '[:space:]')
  [ -n "$after" ] && streamed=1
  sleep 0.02
done
[ "$streamed" = 1 ] || fail "the answer appeared only whole, with its timings: not streamed"
wait_for '^plumb: generated [0-9]+ tokens'
wait_for '^> ?$'
tm send-keys -t chat Up
sleep 0.5
[ "$(screen | grep -c -- "^> $message *$")" = 2 ] || fail "the up arrow did not recall '$message'"
tm send-keys -t chat Enter
for _ in $(seq 6000); do
  [ "$(screen | grep -c '^plumb: generated')" = 2 ] && break
  sleep 0.02
done
[ "$(screen | grep -c '^plumb: generated')" = 2 ] || fail "the recalled message was not answered"
wait_for '^> ?$'
# A question: the template opens <think>, so the answer starts as reasoning, drawn dim (SGR 2).
tm send-keys -t chat "Why?" Enter
for _ in $(seq 6000); do
  [ "$(screen | grep -c '^plumb: generated')" = 3 ] && break
  sleep 0.02
done
[ "$(screen | grep -c '^plumb: generated')" = 3 ] || fail "the question was not answered"
tm capture-pane -p -e -t chat | grep -q $'\e\\[2m' || fail "no dim text (the reasoning) on the pane"
wait_for '^> ?$'
tm send-keys -t chat /exit Enter
wait_for '^chat exited with status 0$'
echo "PASS"
