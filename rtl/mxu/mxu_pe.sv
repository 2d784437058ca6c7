// One multiply-accumulate cell of the weight-stationary array (docs/rtl.md).
//
// Every cycle the array advances (adv), the cell
//   1. passes the input element it received from the left to the right, with its valid and bank
//      bits, and
//   2. adds the product of that element and the weight of the bank the element names to the
//      partial sum from above, and passes the sum down.
// Data registers load only with a valid element, so an idle cell holds its state.
//
// It holds two weights (J17 §2: one tile plus one for double buffering, the shift of one hidden
// behind the multiply on the other). The element's bank bit picks the one it multiplies with, so
// a new tile takes effect with the first input row that asks for it, as that row's diagonal
// wavefront (J17 §2) reaches the cell, while rows still in flight finish with the old tile.
//
// Weight shift: the column's weights shift down one row per beat through the bank being loaded.
// A cell joins the shift one beat after the cell above it (armed_q), so row k first changes on the
// tile's beat k; the last beat of a tile disarms the column. With the beats skewed one cycle per
// column, no cell's old weight is overwritten before the last row of the old tile has passed it,
// even when the shift starts the cycle that row enters.
module mxu_pe (
    input  logic               clk,
    input  logic               rst_n,
    input  logic               adv,
    // Input wave, from the left.
    input  logic               x_valid_i,
    input  logic               x_bank_i,
    input  logic signed [ 7:0] x_i,
    output logic               x_valid_o,
    output logic               x_bank_o,
    output logic signed [ 7:0] x_o,
    // Partial sums, from above.
    input  logic signed [31:0] psum_i,
    output logic signed [31:0] psum_o,
    // Weight shift: the column's current beat (broadcast down the column) ...
    input  logic               beat_i,       // a beat is at the top of the column this cycle
    input  logic               beat_last_i,  // and it is the last of its tile
    input  logic               beat_bank_i,  // the bank being loaded
    // ... and the chain from the cell above.
    input  logic               armed_i,      // the cell above shifts on this beat
    input  logic signed [ 7:0] w_i,          // its weight in the bank being loaded
    output logic               armed_o,
    output logic signed [ 7:0] w_o           // this cell's weight in the bank being loaded
);
  logic signed [7:0] w_q[2];
  logic armed_q;
  logic shift;
  logic signed [7:0] w_sel;
  logic signed [15:0] product;

  // The top row shifts on every beat (armed_i is tied high there); below, a cell shifts on the
  // beats after the one that first shifted the cell above.
  assign shift = beat_i && armed_i;
  assign w_sel = w_q[x_bank_i];
  assign product = 16'(x_i) * 16'(w_sel);

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      x_valid_o <= 1'b0;
      x_bank_o <= 1'b0;
      x_o <= '0;
      psum_o <= '0;
      w_q[0] <= '0;
      w_q[1] <= '0;
      armed_q <= 1'b0;
    end else if (adv) begin
      x_valid_o <= x_valid_i;
      if (x_valid_i) begin
        x_bank_o <= x_bank_i;
        x_o <= x_i;
        psum_o <= psum_i + 32'(product);
      end
      if (shift) w_q[beat_bank_i] <= w_i;
      if (beat_i) armed_q <= !beat_last_i && (armed_q || armed_i);
    end
  end

  assign armed_o = armed_q;
  assign w_o = w_q[beat_bank_i];
endmodule
