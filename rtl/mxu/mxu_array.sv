// A weight-stationary systolic array of ROWS x COLS mxu_pe cells: int8 x int8 products summed
// down each column into int32 (wrapping), the micro-architecture docs/timing-model.md times and
// hw/mxu/ models (docs/rtl.md has the diagrams and the cycle-by-cycle schedule).
//
// Streams (valid/ready; a beat moves on a rising edge where both are high; a producer holds valid
// and its payload until then):
//   w    one tile row per beat, COLS weights; ROWS beats make a tile, array row ROWS-1 first. The
//        beats shift into the shadow bank while the active bank computes; a tile shorter or
//        narrower than the array is padded with zeros by the producer.
//   in   one input vector per beat, ROWS elements (element k meets array row k). in_swap marks
//        the first vector of a multiply that uses the tile in the shadow bank: in_ready is low
//        for it until the whole tile has shifted in (shadow_full).
//   out  one result row per beat, COLS int32 column sums, in input order. A low out_ready
//        freezes the whole array (and so both input streams) until the row is taken.
// Timing with out_ready high: a vector accepted in cycle t leaves in cycle t + ROWS + COLS - 1;
// a tile whose first beat is accepted in cycle s can be swapped in from cycle s + ROWS; the first
// beat of the next tile can be accepted in the cycle the swap row is.
//
// Every data register loads only when a valid beat enters it: an idle array holds its state, so
// skipping the clock edges of an idle array changes nothing (hw/mxu/rtl_mxu.cpp relies on it).
//
// Sizes are set by -G overrides from the chip JSON (rtl/CMakeLists.txt); never edit the defaults
// to match a chip.
module mxu_array #(
    parameter int ROWS = 4,
    parameter int COLS = 4
) (
    input  logic               clk,
    input  logic               rst_n,          // synchronous, active low
    input  logic               w_valid,
    output logic               w_ready,
    input  logic signed [ 7:0] w_data  [COLS],
    input  logic               in_valid,
    output logic               in_ready,
    input  logic               in_swap,
    input  logic signed [ 7:0] in_data [ROWS],
    output logic               out_valid,
    input  logic               out_ready,
    output logic signed [31:0] out_data[COLS],
    output logic               shadow_full,    // a whole tile waits in the shadow bank
    output logic               busy            // rows or weights in flight: edges change state
);
  localparam int CountW = $clog2(ROWS + 1);
  localparam logic [CountW-1:0] TileBeats = CountW'(ROWS);

  // ---------------------------------------------------------------------------------------------
  // 1. Control at the corner: which bank the next row uses, how much of the next tile has arrived.
  logic adv;  // the array advances this cycle
  logic cur_bank;  // bank of the resident tile: rows without in_swap use it
  logic [CountW-1:0] shadow_beats;  // beats of the next tile already accepted
  logic in_fire, swap_fire, w_fire;
  logic [CountW-1:0] beats_before;  // shadow beats before this cycle's beat
  logic row_bank, load_bank;

  assign adv = !out_valid || out_ready;
  assign shadow_full = shadow_beats == TileBeats;
  assign in_ready = adv && (!in_swap || shadow_full);
  assign in_fire = in_valid && in_ready;
  assign swap_fire = in_fire && in_swap;
  // A swap frees the old bank in the same cycle: the next tile may start shifting into it at once,
  // because its cells are overwritten only after the last old row has passed them (mxu_pe).
  assign beats_before = swap_fire ? '0 : shadow_beats;
  assign w_ready = adv && beats_before != TileBeats;
  assign w_fire = w_valid && w_ready;
  assign row_bank = cur_bank ^ in_swap;
  assign load_bank = !(cur_bank ^ swap_fire);

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      cur_bank <= 1'b0;
      shadow_beats <= '0;
    end else begin
      cur_bank <= cur_bank ^ swap_fire;
      shadow_beats <= beats_before + CountW'(w_fire);
    end
  end

  // ---------------------------------------------------------------------------------------------
  // 2. Weight skew: column n sees each beat n cycles after the corner, in step with the input
  //    wavefront, so the shift never overtakes rows still using the bank it loads.
  logic col_beat[COLS] /* verilator split_var */;
  logic col_last[COLS] /* verilator split_var */;
  logic col_bank[COLS] /* verilator split_var */;
  logic signed [7:0] col_w[COLS] /* verilator split_var */;

  assign col_beat[0] = w_fire;
  assign col_last[0] = beats_before == TileBeats - 1'b1;
  assign col_bank[0] = load_bank;
  assign col_w[0] = w_data[0];

  for (genvar n = 1; n < COLS; n++) begin : g_wskew
    always_ff @(posedge clk) begin
      if (!rst_n) begin
        col_beat[n] <= 1'b0;
        col_last[n] <= 1'b0;
        col_bank[n] <= 1'b0;
      end else if (adv) begin
        col_beat[n] <= col_beat[n-1];
        col_last[n] <= col_last[n-1];
        col_bank[n] <= col_bank[n-1];
      end
    end
    // w_data[n] delayed n cycles; stage i loads when the beat it belongs to moves into it.
    logic signed [7:0] w_q[n+1] /* verilator split_var */;
    assign w_q[0] = w_data[n];
    for (genvar i = 0; i < n; i++) begin : g_stage
      always_ff @(posedge clk) begin
        if (!rst_n) w_q[i+1] <= '0;
        else if (adv && col_beat[i]) w_q[i+1] <= w_q[i];
      end
    end
    assign col_w[n] = w_q[n];
  end

  // ---------------------------------------------------------------------------------------------
  // 3. Input skew: element k of a row reaches array row k k cycles after the row was accepted.
  logic row_valid[ROWS] /* verilator split_var */;
  logic row_bank_q[ROWS] /* verilator split_var */;
  logic signed [7:0] row_x[ROWS] /* verilator split_var */;

  assign row_valid[0] = in_fire;
  assign row_bank_q[0] = row_bank;
  assign row_x[0] = in_data[0];

  for (genvar k = 1; k < ROWS; k++) begin : g_xskew
    always_ff @(posedge clk) begin
      if (!rst_n) begin
        row_valid[k] <= 1'b0;
        row_bank_q[k] <= 1'b0;
      end else if (adv) begin
        row_valid[k] <= row_valid[k-1];
        row_bank_q[k] <= row_bank_q[k-1];
      end
    end
    // in_data[k] delayed k cycles; stage i loads when the row it belongs to moves into it.
    logic signed [7:0] x_q[k+1] /* verilator split_var */;
    assign x_q[0] = in_data[k];
    for (genvar i = 0; i < k; i++) begin : g_stage
      always_ff @(posedge clk) begin
        if (!rst_n) x_q[i+1] <= '0;
        else if (adv && row_valid[i]) x_q[i+1] <= x_q[i];
      end
    end
    assign row_x[k] = x_q[k];
  end

  // ---------------------------------------------------------------------------------------------
  // 4. The cells. Index [k][n] of a left/right signal is what enters cell (k, n) from the left;
  //    of an up/down signal, what enters it from above. The right and bottom edges' outputs of the
  //    x wave and of the shift chain go nowhere.
  /* verilator lint_off UNUSEDSIGNAL */
  logic x_valid[ROWS][COLS+1] /* verilator split_var */;
  logic x_bank[ROWS][COLS+1] /* verilator split_var */;
  logic signed [7:0] x[ROWS][COLS+1] /* verilator split_var */;
  logic signed [7:0] w_chain[ROWS+1][COLS] /* verilator split_var */;
  /* verilator lint_on UNUSEDSIGNAL */
  logic signed [31:0] psum[ROWS+1][COLS] /* verilator split_var */;
  logic armed[ROWS+1][COLS] /* verilator split_var */;

  for (genvar k = 0; k < ROWS; k++) begin : g_row
    assign x_valid[k][0] = row_valid[k];
    assign x_bank[k][0] = row_bank_q[k];
    assign x[k][0] = row_x[k];
    for (genvar n = 0; n < COLS; n++) begin : g_col
      if (k == 0) begin : g_top
        assign psum[0][n] = '0;
        assign armed[0][n] = 1'b1;
        assign w_chain[0][n] = col_w[n];
      end
      mxu_pe u_pe (
          .clk        (clk),
          .rst_n      (rst_n),
          .adv        (adv),
          .x_valid_i  (x_valid[k][n]),
          .x_bank_i   (x_bank[k][n]),
          .x_i        (x[k][n]),
          .x_valid_o  (x_valid[k][n+1]),
          .x_bank_o   (x_bank[k][n+1]),
          .x_o        (x[k][n+1]),
          .psum_i     (psum[k][n]),
          .psum_o     (psum[k+1][n]),
          .beat_i     (col_beat[n]),
          .beat_last_i(col_last[n]),
          .beat_bank_i(col_bank[n]),
          .armed_i    (armed[k][n]),
          .w_i        (w_chain[k][n]),
          .armed_o    (armed[k+1][n]),
          .w_o        (w_chain[k+1][n])
      );
    end
  end

  // ---------------------------------------------------------------------------------------------
  // 5. Output de-skew: column n's sum leaves the bottom row n cycles after column 0's; delaying it
  //    COLS - 1 - n cycles lines a row's columns up. Column COLS - 1 needs no delay, so its valid
  //    bit is the row's.
  assign out_valid = x_valid[ROWS-1][COLS];
  assign out_data[COLS-1] = psum[ROWS][COLS-1];

  for (genvar n = 0; n < COLS - 1; n++) begin : g_deskew
    localparam int Delay = COLS - 1 - n;
    // Stage i holds the sum while the row's valid bit is in cell (ROWS - 1, n + i + 1)'s output.
    logic signed [31:0] d_q[Delay+1] /* verilator split_var */;
    assign d_q[0] = psum[ROWS][n];
    for (genvar i = 0; i < Delay; i++) begin : g_stage
      always_ff @(posedge clk) begin
        if (!rst_n) d_q[i+1] <= '0;
        else if (adv && x_valid[ROWS-1][n+1+i]) d_q[i+1] <= d_q[i];
      end
    end
    assign out_data[n] = d_q[Delay];
  end

  // Any row in flight has its valid bit in the input skew or in some cell until it leaves; a
  // shift in flight has a beat in the weight skew or an armed cell.
  logic [ROWS-1:0] skew_busy;
  logic [COLS-1:0] wskew_busy;
  logic [ROWS*COLS-1:0] cell_busy;
  assign skew_busy[0] = 1'b0;  // row 0 enters the cells without delay
  assign wskew_busy[0] = 1'b0;
  for (genvar k = 1; k < ROWS; k++) begin : g_skew_busy
    assign skew_busy[k] = row_valid[k];
  end
  for (genvar n = 1; n < COLS; n++) begin : g_wskew_busy
    assign wskew_busy[n] = col_beat[n];
  end
  for (genvar k = 0; k < ROWS; k++) begin : g_cell_busy_row
    for (genvar n = 0; n < COLS; n++) begin : g_cell_busy
      assign cell_busy[k*COLS+n] = x_valid[k][n+1] || armed[k+1][n];
    end
  end
  assign busy = |skew_busy || |wskew_busy || |cell_busy;

  // ---------------------------------------------------------------------------------------------
  // 6. Interface rules (checked when Verilated with --assert).
  a_w_valid_held :
  assert property (@(posedge clk) disable iff (!rst_n) w_valid && !w_ready |=> w_valid)
  else $error("w_valid dropped before w_ready");
  a_in_valid_held :
  assert property (@(posedge clk) disable iff (!rst_n) in_valid && !in_ready |=> in_valid)
  else $error("in_valid dropped before in_ready");
  a_out_valid_held :
  assert property (@(posedge clk) disable iff (!rst_n) out_valid && !out_ready |=> out_valid)
  else $error("out_valid dropped before out_ready");
  // Payloads: $stable takes no unpacked arrays, so the previous cycle's payload is kept here.
  logic w_wait_q, in_wait_q, out_wait_q;
  logic signed [7:0] w_prev_q[COLS];
  logic signed [7:0] in_prev_q[ROWS];
  logic signed [31:0] out_prev_q[COLS];
  logic in_swap_prev_q;
  logic [COLS-1:0] w_same, out_same;
  logic [ROWS-1:0] in_same;
  always_ff @(posedge clk) begin
    w_wait_q <= rst_n && w_valid && !w_ready;
    in_wait_q <= rst_n && in_valid && !in_ready;
    out_wait_q <= rst_n && out_valid && !out_ready;
    w_prev_q <= w_data;
    in_prev_q <= in_data;
    out_prev_q <= out_data;
    in_swap_prev_q <= in_swap;
  end
  for (genvar n = 0; n < COLS; n++) begin : g_col_same
    assign w_same[n] = w_data[n] == w_prev_q[n];
    assign out_same[n] = out_data[n] == out_prev_q[n];
  end
  for (genvar k = 0; k < ROWS; k++) begin : g_row_same
    assign in_same[k] = in_data[k] == in_prev_q[k];
  end
  // Immediate assertions: Verilator 5.006 cannot sample unpacked ports for concurrent ones.
  always_ff @(posedge clk) begin
    if (rst_n && w_wait_q) begin
      a_w_data_held : assert (&w_same) else $error("w_data changed while waiting for w_ready");
    end
    if (rst_n && in_wait_q) begin
      a_in_data_held :
      assert (&in_same && in_swap == in_swap_prev_q)
      else $error("in_data or in_swap changed while waiting for in_ready");
    end
    if (rst_n && out_wait_q) begin
      a_out_data_held :
      assert (&out_same) else $error("out_data changed while waiting for out_ready");
    end
  end
  a_shadow_beats_in_range :
  assert property (@(posedge clk) disable iff (!rst_n) shadow_beats <= TileBeats)
  else $error("more beats than a tile has rows");
  a_swap_after_whole_tile :
  assert property (@(posedge clk) disable iff (!rst_n) swap_fire |-> shadow_full)
  else $error("swap accepted before the whole tile shifted in");
endmodule
