module @tiny_llm {
  util.global private @model.embed_tokens.weight = #flow.parameter.named<"model"::"model.embed_tokens.weight"> : tensor<64x32xf32>
  util.global private @model.layers.0.self_attn.q_proj.weight = #flow.parameter.named<"model"::"model.layers.0.self_attn.q_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.0.self_attn.k_proj.weight = #flow.parameter.named<"model"::"model.layers.0.self_attn.k_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.0.self_attn.v_proj.weight = #flow.parameter.named<"model"::"model.layers.0.self_attn.v_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.0.self_attn.o_proj.weight = #flow.parameter.named<"model"::"model.layers.0.self_attn.o_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.0.mlp.gate_proj.weight = #flow.parameter.named<"model"::"model.layers.0.mlp.gate_proj.weight"> : tensor<32x64xf32>
  util.global private @model.layers.0.mlp.up_proj.weight = #flow.parameter.named<"model"::"model.layers.0.mlp.up_proj.weight"> : tensor<32x64xf32>
  util.global private @model.layers.0.mlp.down_proj.weight = #flow.parameter.named<"model"::"model.layers.0.mlp.down_proj.weight"> : tensor<64x32xf32>
  util.global private @model.layers.1.self_attn.q_proj.weight = #flow.parameter.named<"model"::"model.layers.1.self_attn.q_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.1.self_attn.k_proj.weight = #flow.parameter.named<"model"::"model.layers.1.self_attn.k_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.1.self_attn.v_proj.weight = #flow.parameter.named<"model"::"model.layers.1.self_attn.v_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.1.self_attn.o_proj.weight = #flow.parameter.named<"model"::"model.layers.1.self_attn.o_proj.weight"> : tensor<32x32xf32>
  util.global private @model.layers.1.mlp.gate_proj.weight = #flow.parameter.named<"model"::"model.layers.1.mlp.gate_proj.weight"> : tensor<32x64xf32>
  util.global private @model.layers.1.mlp.up_proj.weight = #flow.parameter.named<"model"::"model.layers.1.mlp.up_proj.weight"> : tensor<32x64xf32>
  util.global private @model.layers.1.mlp.down_proj.weight = #flow.parameter.named<"model"::"model.layers.1.mlp.down_proj.weight"> : tensor<32x64xf32>
  func.func @main(%arg0: tensor<8xi32> {tapeout.name = "tokens"}) -> (tensor<8x64xf32> {tapeout.name = "logits"}) {
    %v0 = util.global.load @model.embed_tokens.weight : tensor<64x32xf32>
    %v1 = stablehlo.constant dense<"0x6EFD793F2675623F06F7893F64805C3F2E74813F8E62723F6A27843FD423903F346D7D3FF6D77B3FFC9B6F3FAF08833FA080683F8DBC853FE735833FB4AD7B3F761C763FBA4E773FE6BA9C3FB6977C3F1F5D6C3F9CE2823F6B935E3F2636643F0CE0813F37879A3F473A6E3F1C73863F98A7913FF2BB7E3FF4BF7D3FDC48713F"> : tensor<32xf32>
    %v2 = util.global.load @model.layers.0.self_attn.q_proj.weight : tensor<32x32xf32>
    %v3 = stablehlo.constant dense<"0x0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F0000803F40510A3F6A4E733F98B87E3F3CDF7F3FB9FC7F3FACFF7F3FF8FF7F3FFFFF7F3F40510A3F6A4E733F98B87E3F3CDF7F3FB9FC7F3FACFF7F3FF8FF7F3FFFFF7F3F3311D5BEEC7B4E3FA5E57A3FF97C7F3FE5F27F3FB0FE7F3FDEFF7F3FFDFF7F3F3311D5BEEC7B4E3FA5E57A3FF97C7F3FE5F27F3FB0FE7F3FDEFF7F3FFDFF7F3F26707DBF572F153FEF90743F4FD97E3F83E27F3F0DFD7F3FB5FF7F3FF8FF7F3F26707DBF572F153FEF90743F4FD97E3F83E27F3F0DFD7F3FB5FF7F3FF8FF7F3F305527BFB12E9A3EA7CA6B3F69F47D3F94CB7F3FC2FA7F3F7AFF7F3FF3FF7F3F305527BFB12E9A3EA7CA6B3F69F47D3F94CB7F3FC2FA7F3F7AFF7F3FF3FF7F3F2C3C913ED47229BC40A9603F81CE7C3F19AE7F3FCFF77F3F2EFF7F3FEBFF7F3F2C3C913ED47229BC40A9603F81CE7C3F19AE7F3FCFF77F3F2EFF7F3FEBFF7F3FB8CD753F6F3FA4BE3249533FE3677B3F128A7F3F34F47F3FD2FE7F3FE2FF7F3FB8CD753F6F3FA4BE3249533FE3677B3F128A7F3F34F47F3FD2FE7F3FE2FF7F3FBDFF403FBB7419BFB3CC433FEAC0793F815F7F3FF2EF7F3F65FE7F3FD7FF7F3FBDFF403FBB7419BFB3CC433FEAC0793F815F7F3FF2EF7F3F65FE7F3FD7FF7F3F"> : tensor<8x16xf32>
    %v4 = stablehlo.constant dense<"0x00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000A46A573F3E399F3E7675CC3D5C81013D57D6233C203E4F3B6D12833A5FCBA539A46A573F3E399F3E7675CC3D5C81013D57D6233C203E4F3B6D12833A5FCBA539B7C7683F1B54173FF96F4B3EC870813D3ED4A33CDD3DCF3B6912033B5FCB253AB7C7683F1B54173FF96F4B3EC870813D3ED4A33CDD3DCF3B6912033B5FCB253AC381103EC209503F6D4E973EC1FFC13D20B9F53C116E1B3C939B443B0DB1783AC381103EC209503F6D4E973EC1FFC13D20B9F53C116E1B3C939B443B0DB1783ACFBD41BFDE1D743FD761C73E882E013EDBCB233DCD3C4F3C5812833B5CCBA53ACFBD41BFDE1D743FD761C73E882E013EDBCB233DCD3C4F3C5812833B5CCBA53A107C75BF7FFC7F3F4477F53E1E3C213EF5B64C3D8185813CDED6A33B313ECF3A107C75BF7FFC7F3F4477F53E1E3C213EF5B64C3D8185813CDED6A33B313ECF3A8C0F8FBE4D78723F698C103F6F20413ED19C753D466C9B3C599BC43B05B1F83A8C0F8FBE4D78723F698C103F6F20413ED19C753D466C9B3C599BC43B05B1F83A4630283F6FE84C3F73EB243F50D3603E323E8F3DA652B53CC75FE53BEC11113B4630283F6FE84C3F73EB243F50D3603E323E8F3DA652B53CC75FE53BEC11113B"> : tensor<8x16xf32>
    %v5 = util.global.load @model.layers.0.self_attn.k_proj.weight : tensor<32x32xf32>
    %v6 = util.global.load @model.layers.0.self_attn.v_proj.weight : tensor<32x32xf32>
    %v7 = util.global.load @model.layers.0.self_attn.o_proj.weight : tensor<32x32xf32>
    %v8 = stablehlo.constant dense<"0xED616E3F8C988C3F1D30903F8DB8813FBF716E3F34857C3F19AA903FD0DD743F0210713F80A28B3FFF2A733F7F6E8F3F027A833FAFDC883F68F78A3F4E5F803FFA3B843FE0C0713FBB9A783FC797703F6F4E7A3F8244853FC0D59B3F864D603F80A77C3F13F1673F4953843F9B9D863FFD347A3F8AC0733FE4E7453FE308843F"> : tensor<32xf32>
    %v9 = util.global.load @model.layers.0.mlp.gate_proj.weight : tensor<32x64xf32>
    %v10 = util.global.load @model.layers.0.mlp.up_proj.weight : tensor<32x64xf32>
    %v11 = util.global.load @model.layers.0.mlp.down_proj.weight : tensor<64x32xf32>
    %v12 = stablehlo.constant dense<"0xE104713F532E823F5216823F75CE6C3FF2787F3F7CFA8D3F95F7733FB9628F3FC42F7E3F81C1553F1829713F5C3F723F03E0743FA0EC843FF628513FF17F993FF051603F7C49783FA1E8863F2888883F8F8E803F1B387E3F1F28843FE917813FBE01873F21F0783F4104763F51996F3FFE4E813FC22C893F11AD6E3FFE53773F"> : tensor<32xf32>
    %v13 = util.global.load @model.layers.1.self_attn.q_proj.weight : tensor<32x32xf32>
    %v14 = util.global.load @model.layers.1.self_attn.k_proj.weight : tensor<32x32xf32>
    %v15 = util.global.load @model.layers.1.self_attn.v_proj.weight : tensor<32x32xf32>
    %v16 = util.global.load @model.layers.1.self_attn.o_proj.weight : tensor<32x32xf32>
    %v17 = stablehlo.constant dense<"0x134B873FD794863FCD2C883FAB7F773F9D38713F4075913FB7016D3F1E02883FE8E1803F0B97683FFD19873FEA39723FC3FA8B3F94E3713F4E6E643F8B2E7F3F4CFE803F4242803FD17C743F98EF903FF13D473F2DA37B3F87CA623FDB69873F22D3673F89D8693F029C733F40B96D3F9EF9833FD906853F6F98843F0EA19B3F"> : tensor<32xf32>
    %v18 = util.global.load @model.layers.1.mlp.gate_proj.weight : tensor<32x64xf32>
    %v19 = util.global.load @model.layers.1.mlp.up_proj.weight : tensor<32x64xf32>
    %v20 = util.global.load @model.layers.1.mlp.down_proj.weight : tensor<32x64xf32>
    %v21 = stablehlo.constant dense<"0xFD527C3F98EB8E3F9804693F0D8B813F2ADA8E3F76A37D3F3A417D3F236F663F2FE3593F0BA8903F6A417D3FD5CA813F9855843FCD37843F34B1533FD668963F504F823F3C18933F1B5F823F6D827E3FBEB99D3F62D57D3FE76A873F092B8D3F05C29D3FFC008C3F1E056D3F4F95873FA73F843F17597E3F06CA443FCB83873F"> : tensor<32xf32>
    %v22 = "stablehlo.gather"(%v0, %arg0) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 32>, indices_are_sorted = false} : (tensor<64x32xf32>, tensor<8xi32>) -> tensor<8x32xf32>
    %v23 = stablehlo.multiply %v22, %v22 : tensor<8x32xf32>
    %v24 = stablehlo.constant dense<0x00000000> : tensor<f32>
    %v25 = stablehlo.reduce(%v23 init: %v24) applies stablehlo.add across dimensions = [1] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8xf32>
    %v26 = stablehlo.constant dense<0x42000000> : tensor<8xf32>
    %v27 = stablehlo.divide %v25, %v26 : tensor<8xf32>
    %v28 = stablehlo.constant dense<0x358637BD> : tensor<8xf32>
    %v29 = stablehlo.add %v27, %v28 : tensor<8xf32>
    %v30 = stablehlo.rsqrt %v29 : tensor<8xf32>
    %v31 = stablehlo.broadcast_in_dim %v30, dims = [0] : (tensor<8xf32>) -> tensor<8x32xf32>
    %v32 = stablehlo.multiply %v22, %v31 : tensor<8x32xf32>
    %v33 = stablehlo.broadcast_in_dim %v1, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
    %v34 = stablehlo.multiply %v32, %v33 : tensor<8x32xf32>
    %v35 = stablehlo.dot_general %v34, %v2, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v36 = stablehlo.reshape %v35 : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
    %v37 = stablehlo.transpose %v36, dims = [1, 0, 2] : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
    %v38 = stablehlo.slice %v37 [0:2, 0:8, 0:8] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v39 = stablehlo.slice %v37 [0:2, 0:8, 8:16] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v40 = stablehlo.negate %v39 : tensor<2x8x8xf32>
    %v41 = stablehlo.concatenate %v40, %v38, dim = 2 : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
    %v42 = stablehlo.broadcast_in_dim %v3, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v43 = stablehlo.broadcast_in_dim %v4, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v44 = stablehlo.multiply %v37, %v42 : tensor<2x8x16xf32>
    %v45 = stablehlo.multiply %v41, %v43 : tensor<2x8x16xf32>
    %v46 = stablehlo.add %v44, %v45 : tensor<2x8x16xf32>
    %v47 = stablehlo.dot_general %v34, %v5, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v48 = stablehlo.reshape %v47 : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
    %v49 = stablehlo.transpose %v48, dims = [1, 0, 2] : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
    %v50 = stablehlo.slice %v49 [0:2, 0:8, 0:8] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v51 = stablehlo.slice %v49 [0:2, 0:8, 8:16] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v52 = stablehlo.negate %v51 : tensor<2x8x8xf32>
    %v53 = stablehlo.concatenate %v52, %v50, dim = 2 : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
    %v54 = stablehlo.broadcast_in_dim %v3, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v55 = stablehlo.broadcast_in_dim %v4, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v56 = stablehlo.multiply %v49, %v54 : tensor<2x8x16xf32>
    %v57 = stablehlo.multiply %v53, %v55 : tensor<2x8x16xf32>
    %v58 = stablehlo.add %v56, %v57 : tensor<2x8x16xf32>
    %v59 = stablehlo.dot_general %v34, %v6, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v60 = stablehlo.reshape %v59 : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
    %v61 = stablehlo.transpose %v60, dims = [1, 0, 2] : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
    %v62 = stablehlo.transpose %v58, dims = [0, 2, 1] : (tensor<2x8x16xf32>) -> tensor<2x16x8xf32>
    %v63 = stablehlo.dot_general %v46, %v62, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<2x8x8xf32>
    %v64 = stablehlo.constant dense<0x3E800000> : tensor<2x8x8xf32>
    %v65 = stablehlo.multiply %v63, %v64 : tensor<2x8x8xf32>
    %v66 = stablehlo.iota dim = 0 : tensor<8x8xi64>
    %v67 = stablehlo.iota dim = 1 : tensor<8x8xi64>
    %v68 = stablehlo.constant dense<0> : tensor<8x8xi64>
    %v69 = stablehlo.add %v66, %v68 : tensor<8x8xi64>
    %v70 = stablehlo.compare GE, %v69, %v67, SIGNED : (tensor<8x8xi64>, tensor<8x8xi64>) -> tensor<8x8xi1>
    %v71 = stablehlo.broadcast_in_dim %v70, dims = [1, 2] : (tensor<8x8xi1>) -> tensor<2x8x8xi1>
    %v72 = stablehlo.constant dense<0xFF800000> : tensor<2x8x8xf32>
    %v73 = stablehlo.select %v71, %v65, %v72 : tensor<2x8x8xi1>, tensor<2x8x8xf32>
    %v74 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %v75 = stablehlo.reduce(%v73 init: %v74) applies stablehlo.maximum across dimensions = [2] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %v76 = stablehlo.broadcast_in_dim %v75, dims = [0, 1] : (tensor<2x8xf32>) -> tensor<2x8x8xf32>
    %v77 = stablehlo.subtract %v73, %v76 : tensor<2x8x8xf32>
    %v78 = stablehlo.exponential %v77 : tensor<2x8x8xf32>
    %v79 = stablehlo.constant dense<0x00000000> : tensor<f32>
    %v80 = stablehlo.reduce(%v78 init: %v79) applies stablehlo.add across dimensions = [2] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %v81 = stablehlo.broadcast_in_dim %v80, dims = [0, 1] : (tensor<2x8xf32>) -> tensor<2x8x8xf32>
    %v82 = stablehlo.divide %v78, %v81 : tensor<2x8x8xf32>
    %v83 = stablehlo.dot_general %v82, %v61, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %v84 = stablehlo.transpose %v83, dims = [1, 0, 2] : (tensor<2x8x16xf32>) -> tensor<8x2x16xf32>
    %v85 = stablehlo.reshape %v84 : (tensor<8x2x16xf32>) -> tensor<8x32xf32>
    %v86 = stablehlo.dot_general %v85, %v7, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v87 = stablehlo.add %v22, %v86 : tensor<8x32xf32>
    %v88 = stablehlo.multiply %v87, %v87 : tensor<8x32xf32>
    %v89 = stablehlo.constant dense<0x00000000> : tensor<f32>
    %v90 = stablehlo.reduce(%v88 init: %v89) applies stablehlo.add across dimensions = [1] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8xf32>
    %v91 = stablehlo.constant dense<0x42000000> : tensor<8xf32>
    %v92 = stablehlo.divide %v90, %v91 : tensor<8xf32>
    %v93 = stablehlo.constant dense<0x358637BD> : tensor<8xf32>
    %v94 = stablehlo.add %v92, %v93 : tensor<8xf32>
    %v95 = stablehlo.rsqrt %v94 : tensor<8xf32>
    %v96 = stablehlo.broadcast_in_dim %v95, dims = [0] : (tensor<8xf32>) -> tensor<8x32xf32>
    %v97 = stablehlo.multiply %v87, %v96 : tensor<8x32xf32>
    %v98 = stablehlo.broadcast_in_dim %v8, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
    %v99 = stablehlo.multiply %v97, %v98 : tensor<8x32xf32>
    %v100 = stablehlo.dot_general %v99, %v9, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %v101 = stablehlo.logistic %v100 : tensor<8x64xf32>
    %v102 = stablehlo.multiply %v100, %v101 : tensor<8x64xf32>
    %v103 = stablehlo.dot_general %v99, %v10, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %v104 = stablehlo.multiply %v102, %v103 : tensor<8x64xf32>
    %v105 = stablehlo.dot_general %v104, %v11, contracting_dims = [1] x [0] : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
    %v106 = stablehlo.add %v87, %v105 : tensor<8x32xf32>
    %v107 = stablehlo.multiply %v106, %v106 : tensor<8x32xf32>
    %v108 = stablehlo.constant dense<0x00000000> : tensor<f32>
    %v109 = stablehlo.reduce(%v107 init: %v108) applies stablehlo.add across dimensions = [1] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8xf32>
    %v110 = stablehlo.constant dense<0x42000000> : tensor<8xf32>
    %v111 = stablehlo.divide %v109, %v110 : tensor<8xf32>
    %v112 = stablehlo.constant dense<0x358637BD> : tensor<8xf32>
    %v113 = stablehlo.add %v111, %v112 : tensor<8xf32>
    %v114 = stablehlo.rsqrt %v113 : tensor<8xf32>
    %v115 = stablehlo.broadcast_in_dim %v114, dims = [0] : (tensor<8xf32>) -> tensor<8x32xf32>
    %v116 = stablehlo.multiply %v106, %v115 : tensor<8x32xf32>
    %v117 = stablehlo.broadcast_in_dim %v12, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
    %v118 = stablehlo.multiply %v116, %v117 : tensor<8x32xf32>
    %v119 = stablehlo.dot_general %v118, %v13, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v120 = stablehlo.reshape %v119 : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
    %v121 = stablehlo.transpose %v120, dims = [1, 0, 2] : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
    %v122 = stablehlo.slice %v121 [0:2, 0:8, 0:8] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v123 = stablehlo.slice %v121 [0:2, 0:8, 8:16] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v124 = stablehlo.negate %v123 : tensor<2x8x8xf32>
    %v125 = stablehlo.concatenate %v124, %v122, dim = 2 : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
    %v126 = stablehlo.broadcast_in_dim %v3, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v127 = stablehlo.broadcast_in_dim %v4, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v128 = stablehlo.multiply %v121, %v126 : tensor<2x8x16xf32>
    %v129 = stablehlo.multiply %v125, %v127 : tensor<2x8x16xf32>
    %v130 = stablehlo.add %v128, %v129 : tensor<2x8x16xf32>
    %v131 = stablehlo.dot_general %v118, %v14, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v132 = stablehlo.reshape %v131 : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
    %v133 = stablehlo.transpose %v132, dims = [1, 0, 2] : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
    %v134 = stablehlo.slice %v133 [0:2, 0:8, 0:8] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v135 = stablehlo.slice %v133 [0:2, 0:8, 8:16] : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
    %v136 = stablehlo.negate %v135 : tensor<2x8x8xf32>
    %v137 = stablehlo.concatenate %v136, %v134, dim = 2 : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
    %v138 = stablehlo.broadcast_in_dim %v3, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v139 = stablehlo.broadcast_in_dim %v4, dims = [1, 2] : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %v140 = stablehlo.multiply %v133, %v138 : tensor<2x8x16xf32>
    %v141 = stablehlo.multiply %v137, %v139 : tensor<2x8x16xf32>
    %v142 = stablehlo.add %v140, %v141 : tensor<2x8x16xf32>
    %v143 = stablehlo.dot_general %v118, %v15, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v144 = stablehlo.reshape %v143 : (tensor<8x32xf32>) -> tensor<8x2x16xf32>
    %v145 = stablehlo.transpose %v144, dims = [1, 0, 2] : (tensor<8x2x16xf32>) -> tensor<2x8x16xf32>
    %v146 = stablehlo.transpose %v142, dims = [0, 2, 1] : (tensor<2x8x16xf32>) -> tensor<2x16x8xf32>
    %v147 = stablehlo.dot_general %v130, %v146, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<2x8x8xf32>
    %v148 = stablehlo.constant dense<0x3E800000> : tensor<2x8x8xf32>
    %v149 = stablehlo.multiply %v147, %v148 : tensor<2x8x8xf32>
    %v150 = stablehlo.iota dim = 0 : tensor<8x8xi64>
    %v151 = stablehlo.iota dim = 1 : tensor<8x8xi64>
    %v152 = stablehlo.constant dense<0> : tensor<8x8xi64>
    %v153 = stablehlo.add %v150, %v152 : tensor<8x8xi64>
    %v154 = stablehlo.compare GE, %v153, %v151, SIGNED : (tensor<8x8xi64>, tensor<8x8xi64>) -> tensor<8x8xi1>
    %v155 = stablehlo.broadcast_in_dim %v154, dims = [1, 2] : (tensor<8x8xi1>) -> tensor<2x8x8xi1>
    %v156 = stablehlo.constant dense<0xFF800000> : tensor<2x8x8xf32>
    %v157 = stablehlo.select %v155, %v149, %v156 : tensor<2x8x8xi1>, tensor<2x8x8xf32>
    %v158 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %v159 = stablehlo.reduce(%v157 init: %v158) applies stablehlo.maximum across dimensions = [2] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %v160 = stablehlo.broadcast_in_dim %v159, dims = [0, 1] : (tensor<2x8xf32>) -> tensor<2x8x8xf32>
    %v161 = stablehlo.subtract %v157, %v160 : tensor<2x8x8xf32>
    %v162 = stablehlo.exponential %v161 : tensor<2x8x8xf32>
    %v163 = stablehlo.constant dense<0x00000000> : tensor<f32>
    %v164 = stablehlo.reduce(%v162 init: %v163) applies stablehlo.add across dimensions = [2] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %v165 = stablehlo.broadcast_in_dim %v164, dims = [0, 1] : (tensor<2x8xf32>) -> tensor<2x8x8xf32>
    %v166 = stablehlo.divide %v162, %v165 : tensor<2x8x8xf32>
    %v167 = stablehlo.dot_general %v166, %v145, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %v168 = stablehlo.transpose %v167, dims = [1, 0, 2] : (tensor<2x8x16xf32>) -> tensor<8x2x16xf32>
    %v169 = stablehlo.reshape %v168 : (tensor<8x2x16xf32>) -> tensor<8x32xf32>
    %v170 = stablehlo.dot_general %v169, %v16, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %v171 = stablehlo.add %v106, %v170 : tensor<8x32xf32>
    %v172 = stablehlo.multiply %v171, %v171 : tensor<8x32xf32>
    %v173 = stablehlo.constant dense<0x00000000> : tensor<f32>
    %v174 = stablehlo.reduce(%v172 init: %v173) applies stablehlo.add across dimensions = [1] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8xf32>
    %v175 = stablehlo.constant dense<0x42000000> : tensor<8xf32>
    %v176 = stablehlo.divide %v174, %v175 : tensor<8xf32>
    %v177 = stablehlo.constant dense<0x358637BD> : tensor<8xf32>
    %v178 = stablehlo.add %v176, %v177 : tensor<8xf32>
    %v179 = stablehlo.rsqrt %v178 : tensor<8xf32>
    %v180 = stablehlo.broadcast_in_dim %v179, dims = [0] : (tensor<8xf32>) -> tensor<8x32xf32>
    %v181 = stablehlo.multiply %v171, %v180 : tensor<8x32xf32>
    %v182 = stablehlo.broadcast_in_dim %v17, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
    %v183 = stablehlo.multiply %v181, %v182 : tensor<8x32xf32>
    %v184 = stablehlo.dot_general %v183, %v18, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %v185 = stablehlo.logistic %v184 : tensor<8x64xf32>
    %v186 = stablehlo.multiply %v184, %v185 : tensor<8x64xf32>
    %v187 = stablehlo.dot_general %v183, %v19, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    %v188 = stablehlo.transpose %v20, dims = [1, 0] : (tensor<32x64xf32>) -> tensor<64x32xf32>
    %v189 = stablehlo.multiply %v186, %v187 : tensor<8x64xf32>
    %v190 = stablehlo.dot_general %v189, %v188, contracting_dims = [1] x [0] : (tensor<8x64xf32>, tensor<64x32xf32>) -> tensor<8x32xf32>
    %v191 = stablehlo.add %v171, %v190 : tensor<8x32xf32>
    %v192 = stablehlo.multiply %v191, %v191 : tensor<8x32xf32>
    %v193 = stablehlo.constant dense<0x00000000> : tensor<f32>
    %v194 = stablehlo.reduce(%v192 init: %v193) applies stablehlo.add across dimensions = [1] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8xf32>
    %v195 = stablehlo.constant dense<0x42000000> : tensor<8xf32>
    %v196 = stablehlo.divide %v194, %v195 : tensor<8xf32>
    %v197 = stablehlo.constant dense<0x358637BD> : tensor<8xf32>
    %v198 = stablehlo.add %v196, %v197 : tensor<8xf32>
    %v199 = stablehlo.rsqrt %v198 : tensor<8xf32>
    %v200 = stablehlo.broadcast_in_dim %v199, dims = [0] : (tensor<8xf32>) -> tensor<8x32xf32>
    %v201 = stablehlo.multiply %v191, %v200 : tensor<8x32xf32>
    %v202 = stablehlo.broadcast_in_dim %v21, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
    %v203 = stablehlo.multiply %v201, %v202 : tensor<8x32xf32>
    %v204 = stablehlo.transpose %v0, dims = [1, 0] : (tensor<64x32xf32>) -> tensor<32x64xf32>
    %v205 = stablehlo.dot_general %v203, %v204, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
    return %v205 : tensor<8x64xf32>
  }
}
